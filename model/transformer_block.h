// One Llama 3 block with hand-written forward and backward:
//
//   h   = x + wo(attention(rope(wqkv(attention_norm(x)))))
//   out = h + w2(swiglu(w13(ffn_norm(h))))
//
// The residual stream x, h, out is [T, D] with T this rank's tokens (its sequence shard under
// tensor parallelism); wqkv's and w13's outputs cover the whole micro-batch, B·S rows, with
// this rank's heads and ffn slice. Under context parallelism S is this rank's S/cp tokens of
// each sequence (its two head-tail chunks), and attention reaches the other ranks' keys and
// values through the block's ContextParallelComm. Which activations survive until backward is
// the block's BlockRecompute mode (see activation_checkpoint.h).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "model/context_parallel_comm.h"
#include "model/linear.h"
#include "model/parameter.h"
#include "model/producer_fusion.h"

namespace titan::model {

// What every block of one micro-batch shares. S is this rank's tokens of a sequence (S/cp of
// the whole sequence under context parallelism); the RoPE tables' row t is the global position
// of its token t.
struct SequenceBatch {
  int64_t batch = 0;    // B
  int64_t seq_len = 0;  // S
  Tensor rope_cos;      // [S, Dh/2]
  Tensor rope_sin;      // [S, Dh/2]
  DocumentMask mask;    // block_causal: each token's document start [B, S]; else causal
  AttentionBackend attention_backend = AttentionBackend::Native;  // the model's (on a GPU)
};

// Activations a block keeps between forward and backward. Shapes with T = this rank's tokens,
// B·S = the micro-batch, local heads H, Hkv and local ffn width F.
struct BlockActivations {
  Tensor x;          // [T, D]               block input: kept in every mode
  Tensor attn_rstd;  // [T]                  attention_norm statistics
  Tensor xn;         // [T, D]               attention_norm(x): wqkv's input
  Tensor qkv;        // [B·S, (H+2Hkv)·Dh]   wqkv's output after RoPE
  Tensor attn;       // [B·S, H·Dh]          attention output: wo's input
  Tensor lse;        // [B, H, S]            softmax log-sum-exp
  Tensor h;          // [T, D]               x + wo(attn)
  Tensor ffn_rstd;   // [T]                  ffn_norm statistics
  Tensor hn;         // [T, D]               ffn_norm(h): w13's input
  Tensor h13;        // [B·S, 2F]            w13's output
  Tensor g;          // [B·S, F]             swiglu(h13): w2's input
};

// What a block keeps of one micro-batch between its forward and its backward: taken out and
// put back around other micro-batches' work (a pipeline stage holds several at once).
struct BlockState {
  BlockActivations saved;
  SequenceBatch batch;
};

class TransformerBlock {
 public:
  // Creates the block's parameters (full, unsharded) and linears.
  TransformerBlock(int layer_id, const ModelArgs& args, DType dtype);

  // x [T, D] -> out [T, D]; keeps what backward needs under the block's recompute mode.
  Tensor forward(const Tensor& x, const SequenceBatch& batch);
  // dout [T, D] -> dx [T, D]; accumulates every parameter's gradient; releases the activations.
  Tensor backward(const Tensor& dout);
  // Drops what forward kept for a backward that will not come (a forward-only pass).
  void release_activations() { saved_ = {}; }
  // What forward kept, moved out (the block then holds nothing), and moved back in before the
  // backward of that micro-batch.
  BlockState take_state() { return {std::exchange(saved_, {}), batch_}; }
  void restore_state(BlockState state) {
    saved_ = std::move(state.saved);
    batch_ = std::move(state.batch);
  }

  int layer_id() const { return layer_id_; }
  BlockRecompute recompute() const { return recompute_; }
  void set_recompute(BlockRecompute mode) { recompute_ = mode; }
  // Where attention meets the cp group (the local attention until set).
  void set_context_parallel(std::shared_ptr<ContextParallelComm> cp) { cp_ = std::move(cp); }
  std::vector<Parameter*> parameters();
  std::vector<Linear*> linears() { return {&wqkv_, &wo_, &w13_, &w2_}; }
  // Bytes of the activations held now (between a forward and its backward).
  int64_t saved_bytes() const;

 private:
  // Computes every field of saved_; with produce_w2_input, returns w2's input as the op that
  // wrote it prepared it (model/producer_fusion.h) for the forward's w2.
  ProducedOperands forward_all(const Tensor& x, bool produce_w2_input);
  void drop_recomputable();  // frees what the recompute mode will rebuild
  void recompute_dropped();  // rebuilds it at the start of backward

  int layer_id_;
  ModelArgs args_;
  std::string prefix_;  // "layers.3."
  BlockRecompute recompute_ = BlockRecompute::None;
  std::unique_ptr<Parameter> attention_norm_, wqkv_weight_, wo_weight_, ffn_norm_, w13_weight_,
      w2_weight_;
  Linear wqkv_, wo_, w13_, w2_;
  std::vector<std::unique_ptr<Parameter>> adapter_params_;  // A, B of each adapted linear
  std::shared_ptr<ContextParallelComm> cp_;
  SequenceBatch batch_;
  BlockActivations saved_;
};

}  // namespace titan::model
