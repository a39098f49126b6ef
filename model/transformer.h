// The Llama 3 transformer: token embedding, L blocks, final norm, output projection and the
// cross-entropy loss, with a hand-written backward through all of it.
//
// forward() takes a micro-batch of tokens and targets [B, S] (on any device), computes in the
// dtype and on the device of the weights parallel/ gave it (model/precision.h), returns the sum
// of its token losses and leaves the gradient of (loss · grad_scale) ready for backward();
// backward() accumulates into every parameter's grad. Parallelism enters only through the hooks of
// model_comm.h and the linears' styles, so this file reads the same on 1 rank and on 1000.
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
#include <vector>

#include "core/tensor.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/model_comm.h"
#include "model/parameter.h"
#include "model/transformer_block.h"

namespace titan::model {

struct ParamGroup {
  std::string name;  // "tok_embeddings", "layers.3", "head"
  std::vector<Parameter*> params;
};

class Transformer {
 public:
  // Declares the parameters (no storage: see parameter.h).
  Transformer(const ModelArgs& args, DType dtype);

  // Storage for every parameter not yet given any (parallel/ allocates shards first).
  void allocate(Device device = Device::cpu());
  // torchtitan's initialisation, each value a pure function of (seed, name, index).
  void init_weights(uint64_t seed);

  // tokens, targets [B, S] i32 -> Σ of the B·S token losses (this rank's micro-batch).
  double forward(const Tensor& tokens, const Tensor& targets, double grad_scale);
  void backward();
  // tokens, targets [B, S] i32 -> Σ of the B·S token losses, forward only (see above).
  double evaluate(const Tensor& tokens, const Tensor& targets);
  void zero_grad();

  const ModelArgs& args() const { return args_; }
  DType dtype() const { return dtype_; }
  std::vector<Parameter*> parameters();
  std::vector<ParamGroup> param_groups();
  std::vector<Linear*> linears();  // every linear, output last
  std::vector<TransformerBlock>& layers() { return layers_; }

  void set_activation_checkpoint(const ActivationCheckpointPolicy& policy);
  void set_tensor_parallel(std::shared_ptr<TensorParallelComm> comm);
  void set_param_hooks(std::shared_ptr<ParamHooks> hooks);
  // This rank's vocab rows of tok_embeddings and output begin at `start` (vocab sharding).
  void set_vocab_start(int64_t start) { vocab_start_ = start; }

  // Bytes of activations held now by the model (between forward and backward).
  int64_t saved_activation_bytes() const;

 private:
  const SequenceBatch& sequence_batch(int64_t batch, int64_t seq_len, DType activations,
                                      Device device);
  // forward() and evaluate(): keep_for_backward false drops each block's activations after it.
  double run_forward(const Tensor& tokens, const Tensor& targets, double grad_scale,
                     bool keep_for_backward);
  void release_activations();  // everything kept for backward

  ModelArgs args_;
  DType dtype_;
  std::unique_ptr<Parameter> tok_embeddings_, norm_, output_weight_;
  std::vector<TransformerBlock> layers_;
  Linear output_;
  std::shared_ptr<TensorParallelComm> tp_;
  std::shared_ptr<ParamHooks> hooks_;
  int64_t vocab_start_ = 0;
  SequenceBatch batch_;  // with RoPE tables for the current S

  // Kept from forward for backward.
  Tensor tokens_;      // [B·S] i32
  Tensor final_x_;     // [T, D] last block's output
  Tensor final_xn_;    // [T, D] norm(final_x): output's input
  Tensor final_rstd_;  // [T]
  Tensor dlogits_;     // [B·S, V_local] the loss gradient, written over the logits
};

}  // namespace titan::model
