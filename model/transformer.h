// The Llama 3 transformer: token embedding, L blocks, final norm, output projection and the
// cross-entropy loss, with a hand-written backward through all of it.
//
// forward() takes a micro-batch of tokens and targets [B, S] (on any device), computes in the
// dtype and on the device of the weights parallel/ gave it (model/precision.h), returns the sum
// of its token losses and leaves the gradient of (loss · grad_scale) ready for backward();
// backward() accumulates into every parameter's grad. Parallelism enters only through the hooks of
// model_comm.h, the linears' styles and context_parallel_comm.h, so this file reads the same on
// 1 rank and on 1000.
//
// Under context parallelism (docs/context_parallel.md) the tokens and targets a rank is given
// are its S/cp of each sequence of S: its two head-tail chunks, cut by the caller. The model
// turns each token by its global position (RoPE tables cut by ContextParallelComm::local_rows)
// and the blocks' attention reaches the other cp ranks' keys and values through the same
// interface; everything else is per token. The loss it returns is the sum over this rank's
// tokens only.
//
// A Transformer may hold only a part of the model (ModelPart): the layers of one pipeline stage,
// with the embedding only on the first stage and the norm, output and loss only on the last
// (docs/architecture.md#decision-17). A part's forward_part() takes what the part before it
// produced — tokens for the first part, the residual stream x [T, D] for the others — and its
// backward_part() returns the gradient of that input; forward() and backward() are the whole
// model's. The parameters keep their names and ids in the whole model ("layers.5.…" is layer 5
// on any stage), so checkpoints and initialisation do not see the split.
//
// Several micro-batches may be between their forward and their backward at once (a pipeline
// stage): take_activations() moves what the last forward kept out of the model, and
// restore_activations() puts it back before that micro-batch's backward. A backward may also be
// split (the zero-bubble schedules): backward_part() with a WeightGradQueue computes the input
// gradient and queues the weight-gradient GEMMs, which backward_weights() runs later, group by
// group between the hooks' before_weight_gradients and after_weight_gradients (model_comm.h).
//
// Attention is causal unless a micro-batch comes with doc_start [B, S] i32 (on the CPU): each
// token's document start, which makes every block's attention block_causal (model/ops/
// attention.h), tokens seeing only their own document. Under cp it holds this rank's S/cp of
// each sequence, cut as the tokens are, with global positions. Every part of a pipeline is given
// its micro-batch's, as the first is given its tokens.
//
// evaluate() is the forward-only pass (validation): the same arithmetic and collectives as
// forward(), so the same loss, but each block's activations are dropped as soon as the next
// block has its input, and nothing is left for a backward. It calls the same parameter hooks
// as forward() and no backward hook: under FSDP the blocks are gathered and resharded as in a
// training forward, and the head stays gathered as after any forward (the next forward reuses
// it, the next backward frees it); no gradient buffer is created and no gradient is touched.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "model/context_parallel_comm.h"
#include "model/linear.h"
#include "model/model_comm.h"
#include "model/parameter.h"
#include "model/transformer_block.h"
#include "model/weight_grad_queue.h"

namespace titan::model {

// The group ids of the whole model, in forward order: 0 the embedding, 1..L the blocks, L + 1
// the head (final norm and output). ParamHooks are called with these ids.
struct ParamGroup {
  std::string name;  // "tok_embeddings", "layers.3", "head"
  int id = 0;
  std::vector<Parameter*> params;
  // Read again by the head: the tied embedding of a part that holds both ends. Gathered at the
  // embedding, it stays so through the output projection's forward and backward, which the model
  // brackets in before_backward(0) so that its gradient exists; after_backward(0) comes once, at
  // the embedding's backward, and reduces the two contributions together.
  bool read_by_head = false;
};
inline constexpr const char kHeadGroupName[] = "head";

// Which part of the model a Transformer holds: layers [first_layer, end_layer), and whether it
// holds the embedding (the first part) and the head (the last part: final norm, output, loss).
struct ModelPart {
  int64_t first_layer = 0;
  int64_t end_layer = -1;  // -1: through the last layer
  bool embedding = true;
  bool head = true;

  static ModelPart whole() { return {}; }
  bool operator==(const ModelPart&) const = default;
};

// What one micro-batch's forward through a part produced.
struct PartOutput {
  Tensor x;             // [T, D] the residual stream for the next part (undefined for the last)
  double loss_sum = 0;  // the last part: Σ of the B·S token losses
};

// What a part keeps of one micro-batch between forward and backward (take_activations()).
struct PartActivations {
  std::vector<BlockState> blocks;
  Tensor tokens, final_x, final_xn, final_rstd, dlogits;
  WeightGradQueue weight_grads;  // a split backward's deferred GEMMs
  bool empty() const { return blocks.empty() && !tokens.defined() && !final_x.defined(); }
};

class Transformer {
 public:
  // Declares the parameters of `part` (no storage: see parameter.h).
  Transformer(const ModelArgs& args, DType dtype, const ModelPart& part = ModelPart::whole());

  // Storage for every parameter not yet given any (parallel/ allocates shards first).
  void allocate(Device device = Device::cpu());
  // torchtitan's initialisation, each value a pure function of (seed, name, index).
  void init_weights(uint64_t seed);

  // The whole model: tokens, targets [B, S] i32 -> Σ of the B·S token losses (this rank's
  // micro-batch). doc_start [B, S] i32: block_causal attention (above); undefined: causal.
  double forward(const Tensor& tokens, const Tensor& targets, double grad_scale,
                 const Tensor& doc_start = {});
  void backward();
  // tokens, targets [B, S] i32 -> Σ of the B·S token losses, forward only (see above).
  double evaluate(const Tensor& tokens, const Tensor& targets, const Tensor& doc_start = {});
  // The same pass, each token's loss −log p(target) kept: [B, S] on the host, in the loss's
  // statistics dtype (f32). Multiple-choice scoring sums a continuation's rows of it.
  Tensor evaluate_tokens(const Tensor& tokens, const Tensor& targets,
                         const Tensor& doc_start = {});
  // The last head forward's token losses [B·S] on the host (f32), moved out: what a pipeline's
  // last stage hands multiple-choice scoring for each microbatch. Undefined once taken.
  Tensor take_token_losses() { return std::move(token_losses_); }
  void zero_grad();

  // One micro-batch of B sequences of S tokens (this cp rank's S/cp of each) through this part.
  // `input`: tokens [B, S] i32 for the part with the embedding, else the previous part's
  // x [T, D] (T = B·S over the tp ranks' sequence shards, as in the whole model). `targets` [B, S]:
  // read by the part with the head only. keep_for_backward false: a forward-only pass (evaluate()).
  PartOutput forward_part(const Tensor& input, const Tensor& targets, int64_t batch,
                          int64_t seq_len, double grad_scale, bool keep_for_backward,
                          const Tensor& doc_start = {});
  // The backward of the last forward_part (or of the activations restored): dx_out [T, D] is
  // the gradient of this part's output (undefined for the part with the head, whose gradient
  // starts at its loss). Returns the gradient of its input x [T, D] (undefined for the part
  // with the embedding). With WeightGrads::Deferred the linears' grad-weight GEMMs are queued
  // instead of run (backward_weights() runs them); every other gradient is complete.
  enum class WeightGrads { Now, Deferred };
  Tensor backward_part(const Tensor& dx_out, WeightGrads weight_grads = WeightGrads::Now);
  // Runs the grad-weight GEMMs a split backward_part left in the restored activations.
  void backward_weights();
  PartActivations take_activations();
  void restore_activations(PartActivations activations);

  const ModelArgs& args() const { return args_; }
  const ModelPart& part() const { return part_; }
  bool has_embedding() const { return part_.embedding; }
  bool has_head() const { return part_.head; }
  DType dtype() const { return dtype_; }
  std::vector<Parameter*> parameters();
  std::vector<ParamGroup> param_groups();
  std::vector<Linear*> linears();  // every linear of this part, output (when held) last
  std::vector<TransformerBlock>& layers() { return layers_; }

  void set_activation_checkpoint(const ActivationCheckpointPolicy& policy);
  void set_tensor_parallel(std::shared_ptr<TensorParallelComm> comm);
  // The cp group every block's attention runs over (one rank, the local attention, until set).
  void set_context_parallel(std::shared_ptr<ContextParallelComm> comm);
  // The backend every block's attention runs on, on a GPU (native until given another): chosen
  // once by the executable (choose_attention_backend), kept by the model, not by the process.
  void run_attention_on(AttentionBackend backend) { batch_.attention_backend = backend; }
  AttentionBackend attention_backend() const { return batch_.attention_backend; }
  void set_param_hooks(std::shared_ptr<ParamHooks> hooks);
  // Whether backward_weights() may join a collective through the hooks (ParamHooks).
  bool weight_gradients_collective() const { return hooks_->weight_gradients_collective(); }
  // This rank's vocab rows of tok_embeddings and output begin at `start` (vocab sharding).
  void set_vocab_start(int64_t start) { vocab_start_ = start; }
  // The group id of the head (L + 1): the last group of the whole model.
  int head_group() const { return static_cast<int>(args_.n_layers) + 1; }
  // Whether the head's output projection computes with this part's own tok_embeddings.
  bool head_ties() const { return args_.tie_word_embeddings && part_.embedding && part_.head; }

  // Bytes of activations held now by the model (between forward and backward).
  int64_t saved_activation_bytes() const;

 private:
  const SequenceBatch& sequence_batch(int64_t batch, int64_t seq_len, DType activations,
                                      Device device, const Tensor& doc_start);
  void release_activations();  // everything kept for backward
  // The loss of the head's logits (dlogits_), which it overwrites with their gradient.
  double loss_and_grad(const Tensor& targets, double grad_scale);

  ModelArgs args_;
  ModelPart part_;  // end_layer resolved
  DType dtype_;
  std::unique_ptr<Parameter> tok_embeddings_, norm_, output_weight_;  // null when not held
  std::vector<TransformerBlock> layers_;
  std::unique_ptr<Linear> output_;  // with the head
  std::shared_ptr<TensorParallelComm> tp_;
  std::shared_ptr<ContextParallelComm> cp_;
  std::shared_ptr<ParamHooks> hooks_;
  int64_t vocab_start_ = 0;
  SequenceBatch batch_;  // with RoPE tables for the current S (this rank's positions)

  // Kept from forward for backward.
  Tensor tokens_;                 // [B·S] i32
  Tensor final_x_;                // [T, D] last block's output
  Tensor final_xn_;               // [T, D] norm(final_x): output's input
  Tensor final_rstd_;             // [T]
  Tensor dlogits_;                // [B·S, V_local] the loss gradient, written over the logits
  Tensor token_losses_;           // [B·S] on the host: the last head forward's token losses
  WeightGradQueue weight_grads_;  // a split backward's deferred GEMMs, until backward_weights()
};

}  // namespace titan::model
