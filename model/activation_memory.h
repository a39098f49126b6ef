// model/'s part of a rank's memory estimate (core/memory_timeline.h): what the transformer
// allocates in a training step, replayed on a MemoryTimeline in the order transformer.cpp and
// transformer_block.cpp allocate and free it, so that a change to either is a change here.
//
// The model's seams are replayed as the model calls them (docs/architecture.md#decision-2):
//
//   GemmsMemory        what a linear's three GEMMs allocate (LinearGemms): nothing in high
//                      precision, bf16-rounded copies of the operands when the CPU emulates bf16
//                      (HighPrecisionGemmsMemory, here); FP8 codes and scales in
//                      fp8/float8_memory.h
//   LinearMemory       what a linear's style allocates around its GEMMs (LinearStyle): the
//                      output and the input gradient (LocalLinearMemory, here); tensor
//                      parallelism's gathered inputs and reduce-scatter chunks in
//                      parallel/memory_estimate.h
//   ParamHooksMemory   what the parameter hooks allocate (ParamHooks): nothing for replicated
//                      parameters; FSDP's gathers, unsharded gradients and collective buffers in
//                      parallel/memory_estimate.h
//
// What the blocks keep for backward, per block and micro-batch of B·S tokens (T = B·S / tp of
// them in the sequence-sharded residual stream; H, Hkv, F, V the local heads, ffn width and
// vocabulary under tensor parallelism):
//
//   none   x, attention_norm(x), h, ffn_norm(h)    [T, D] each
//          qkv after RoPE [B·S, (H + 2·Hkv)·Dh], attention output [B·S, H·Dh]
//          w13's output [B·S, 2·F], SwiGLU's output [B·S, F]
//          the norms' rstd [T] ×2 and attention's log-sum-exp [B, H, S], in the stats dtype
//   op     none without the two norm outputs and SwiGLU's (recomputed in backward)
//   full   x only
//
// The head keeps the final norm's input and output and the logits [B·S, V], which the loss
// overwrites with their gradient.
//
// For the pipeline's executor (app/plan/memory_plan.cpp replays its action lists), one
// TransformerMemory is a stage's part: take_saved and restore_saved move a micro-batch's kept
// activations out and back, and a split backward (I) leaves each grad-weight GEMM with its
// prepared operands held (DeferredGradWeight) until run_deferred (W).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_timeline.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "model/linear.h"

namespace titan::model {

using Bytes = MemoryTimeline::Bytes;

// A GEMM operand as its preparation leaves it (GemmOperand): what preparing it allocated (none
// when it is the tensor itself), and the bytes per row of its values and row scales, which is
// what a tensor-parallel style gathers.
struct PreparedOperand {
  std::vector<Bytes> held;     // what preparing it allocated and the operand keeps (codes, scales)
  double row_bytes = 0;        // values: elements × dtype per row
  double row_scale_bytes = 0;  // row scales per row (rowwise, 1×128), 0 for shared scales
  bool plain = true;           // the high-precision tensor as it came (no copy to gather)
};

// What a LinearGemms allocates. Operands are given as the caller holds them, t [rows, cols] of
// `element_bytes`; run() gets the GEMM's dims as model/linear.h's table prepares them:
// Output M=T N=out K=in, GradInput M=T N=in K=out, GradWeight M=out N=in K=T.
class GemmsMemory;

// A grad-weight GEMM that a split backward leaves for W (model/weight_grad_queue.h): its
// operands as prepared — the tensors themselves when plain, else their copies (bf16, FP8 codes
// and scales) — held until W runs it.
struct DeferredGradWeight {
  std::vector<Bytes> operands;
  GemmsMemory* gemms = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int group = 0;       // the parameter group whose backward deferred it (ParamHooksMemory)
  std::string weight;  // the parameter it adds into: "layers.3.attention.wqkv.weight"
  // Operands made when W runs (LinearGemms::grad_weight_of): what W allocates and runs, in
  // place of gemms->run; `operands` are then what the making reads.
  std::function<void(MemoryTimeline&)> later;
};

class GemmsMemory {
 public:
  virtual ~GemmsMemory() = default;
  virtual PreparedOperand prepare_a(MemoryTimeline& t, GemmKind gemm, int64_t rows, int64_t cols,
                                    double element_bytes) = 0;
  virtual PreparedOperand prepare_b(MemoryTimeline& t, GemmKind gemm, int64_t rows, int64_t cols,
                                    double element_bytes) = 0;
  virtual void run(MemoryTimeline& t, GemmKind gemm, int64_t m, int64_t n, int64_t k) = 0;

  // LinearGemms::output/grad_input/grad_weight on whole tensors: a [a_rows, a_cols] and
  // b [b_rows, b_cols] prepared, the GEMM run, both let go. a_values and b_values are the
  // operands as the caller holds them: what a deferred grad-weight GEMM keeps of a plain one.
  void whole(MemoryTimeline& t, GemmKind gemm, int64_t a_rows, int64_t a_cols, int64_t b_rows,
             int64_t b_cols, int64_t m, int64_t n, int64_t k, double element_bytes,
             const Bytes& a_values = {}, const Bytes& b_values = {});
  // While `into` is set, whole() leaves each grad-weight GEMM there instead of running it
  // (DeferredWeightGemms, model/linear.cpp).
  void defer_grad_weight(std::vector<DeferredGradWeight>* into) { deferred_ = into; }
  bool defers_grad_weight() const { return deferred_ != nullptr; }
  // LinearGemms::grad_weight_of, deferred: `held` kept until W, which runs `later`.
  void defer_made(std::vector<Bytes> held, std::function<void(MemoryTimeline&)> later);

 private:
  std::vector<DeferredGradWeight>* deferred_ = nullptr;
};

class ParamHooksMemory;

// W (WeightGradQueue::run): the deferred GEMMs run in the order deferred, group by group between
// the hooks' before_weight_gradients and after_weight_gradients, each one's operands let go
// after it.
void run_deferred(MemoryTimeline& t, ParamHooksMemory& hooks,
                  std::vector<DeferredGradWeight> deferred);

// HighPrecisionGemms: with bf16_operands (the CPU's bf16 emulation) each f32 operand is
// rounded into a copy of its own, held for the GEMM, under the caller's tag.
class HighPrecisionGemmsMemory final : public GemmsMemory {
 public:
  explicit HighPrecisionGemmsMemory(bool bf16_copies = false) : bf16_copies_(bf16_copies) {}
  PreparedOperand prepare_a(MemoryTimeline& t, GemmKind gemm, int64_t rows, int64_t cols,
                            double element_bytes) override;
  PreparedOperand prepare_b(MemoryTimeline& t, GemmKind gemm, int64_t rows, int64_t cols,
                            double element_bytes) override;
  void run(MemoryTimeline&, GemmKind, int64_t, int64_t, int64_t) override {}

 private:
  PreparedOperand prepare(MemoryTimeline& t, int64_t rows, int64_t cols, double element_bytes);
  bool bf16_copies_;
};

// A linear's weight as this rank computes with it: [out, in] after tensor parallelism.
struct LinearShape {
  int64_t out = 0, in = 0;
};

// What a LinearStyle allocates: forward takes x [rows, in] and returns y; backward takes the
// gradient of y and x [rows, in] again (the same `rows`: x's, sequence-sharded or whole, as the
// style distributes it; dy and x the caller's bytes of them) and returns dx, distributed like x.
class LinearMemory {
 public:
  virtual ~LinearMemory() = default;
  virtual Bytes forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double element_bytes,
                        GemmsMemory& gemms) = 0;
  virtual Bytes backward(MemoryTimeline& t, int64_t rows, const LinearShape& w,
                         double element_bytes, GemmsMemory& gemms, const Bytes& dy,
                         const Bytes& x) = 0;
};

// LocalLinear: y [T, out] then its GEMM; dx [T, in], then grad-input and grad-weight.
class LocalLinearMemory final : public LinearMemory {
 public:
  Bytes forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double element_bytes,
                GemmsMemory& gemms) override;
  Bytes backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double element_bytes,
                 GemmsMemory& gemms, const Bytes& dy, const Bytes& x) override;
};

// How one linear (by its name, "layers.3.attention.wqkv", "output") runs: its style and GEMMs.
struct LinearSeams {
  LinearMemory* style = nullptr;
  GemmsMemory* gemms = nullptr;
  LinearShape weight;  // this rank's [out, in]
  std::string fqn;     // "layers.3.attention.wqkv" (set by TransformerMemory)
};
using LinearSeamsFor = std::function<LinearSeams(const std::string& fqn)>;

// ParamHooks (model_comm.h) as memory: parameter groups are numbered as the model calls them,
// 0 the embedding, 1..L the blocks, L+1 the head.
class ParamHooksMemory {
 public:
  virtual ~ParamHooksMemory() = default;
  virtual void before_forward(MemoryTimeline&, int) {}
  virtual void after_forward(MemoryTimeline&, int) {}
  virtual void before_backward(MemoryTimeline&, int) {}
  virtual void after_backward(MemoryTimeline&, int) {}
  // A split backward (model_comm.h): a group's input half, the weights (by name) whose GEMMs
  // wait for W; W's hooks around the group's GEMMs.
  virtual void before_backward_input(MemoryTimeline& t, int group,
                                     const std::vector<std::string>&) {
    before_backward(t, group);
  }
  virtual void after_backward_input(MemoryTimeline&, int, const std::vector<std::string>&) {}
  virtual void before_weight_gradients(MemoryTimeline&, int) {}
  virtual void after_weight_gradients(MemoryTimeline&, int) {}
};

// ContextParallelComm (context_parallel_comm.h) as memory: the transient buffers of attention
// over the cp ranks, replayed beside the ring and the all-gather they replay
// (parallel/context_parallel_memory.h), as the block calls the cp group for its attention.
// Everything one call holds is gone when it returns.
class ContextParallelMemory {
 public:
  // One block's attention on this rank: B sequences of L = S/cp local tokens, its local heads.
  struct Attention {
    int64_t batch = 1;
    int64_t seq_len = 1;  // L
    int64_t heads = 0, kv_heads = 0, head_dim = 0;
    double element_bytes = 4;
    bool cuda = false;
  };
  virtual ~ContextParallelMemory() = default;
  virtual void attention_forward(MemoryTimeline& t, const Attention& a) const = 0;
  virtual void attention_backward(MemoryTimeline& t, const Attention& a) const = 0;
};

// One micro-batch on one rank: B sequences of S tokens, split over `tp` for the residual
// stream, in activations of `element_bytes` (4 f32, 2 bf16) with statistics (norms' rstd,
// log-sum-exp, the loss's rows) in `stats_bytes`; `cuda` adds the CUDA kernels' own workspaces
// (attention backward's Δ and f32 dq) and moves the tokens to the device.
//
// Where pipeline and context parallelism enter: a pipeline stage replays only its blocks
// (`first_layer`, `layers`; the embedding on the first stage, the head on the last), one
// TransformerMemory per micro-batch in flight; context parallelism gives each rank S / cp of a
// sequence's tokens, which is `seq_len` here, and attention the buffers that bring it the other
// ranks' keys and values (`context_parallel`).
struct ActivationShape {
  int64_t batch = 1;
  int64_t seq_len = 1;
  int64_t tp = 1;
  double element_bytes = 4;
  double stats_bytes = 4;
  bool cuda = false;
  int first_layer = 0;
  int layers = -1;  // -1: every layer from first_layer on
  bool embedding = true;
  bool head = true;
  // cp > 1: attention's transient buffers over the cp ranks, the ring's K/V in hand and in
  // flight or the all-gather's whole sequence of K/V (null: the local attention's).
  std::shared_ptr<const ContextParallelMemory> context_parallel;
};

// Transformer::forward and backward (transformer.cpp, transformer_block.cpp) as allocations.
// One object per model: like the model it keeps, between forward and backward, what the blocks
// saved, and across steps the RoPE tables.
class TransformerMemory {
 public:
  TransformerMemory(const ModelArgs& args, const ActivationCheckpointPolicy& policy,
                    const ActivationShape& shape, LinearSeamsFor linears, ParamHooksMemory& hooks);
  ~TransformerMemory();
  TransformerMemory(const TransformerMemory&) = delete;
  TransformerMemory& operator=(const TransformerMemory&) = delete;

  // input: the [B, S] i32 tokens the trainer handed over (held by the caller; kept as tokens_)
  // or, for a pipeline stage without the embedding, the x [T, D] received or handed over from
  // the stage before (kept as the first block's input).
  void forward(MemoryTimeline& t, const Bytes& input);
  // dout: for a stage without the head, the gradient of its output x [T, D], received or handed
  // over from the stage after. Returns the gradient of a stage's input x [T, D] (none for the
  // stage with the embedding). `defer_weight_grads`: a split backward (the pipeline's I), which
  // leaves each linear's grad-weight GEMM, its operands held, for W (take_deferred).
  Bytes backward(MemoryTimeline& t, const Bytes& dout = {}, bool defer_weight_grads = false);
  // What a split backward left for W (model/weight_grad_queue.h): run_deferred runs it.
  std::vector<DeferredGradWeight> take_deferred();
  // Bytes the blocks and the head keep between forward and backward (saved_activation_bytes).
  double saved_bytes() const;
  // The output x [T, D] of the last forward of a stage without the head: what it sends on.
  const Bytes& output() const { return final_x_; }

  // What the last forward kept, moved out and put back before its backward
  // (Transformer::take_activations, restore_activations): a pipeline stage's micro-batches.
  struct Saved;
  std::shared_ptr<Saved> take_saved();
  void restore_saved(std::shared_ptr<Saved> saved);

 private:
  struct Block;
  void block_forward_all(MemoryTimeline& t, Block& b, const Bytes& x);
  Bytes block_forward(MemoryTimeline& t, int layer, const Bytes& x);
  Bytes block_backward(MemoryTimeline& t, int layer, const Bytes& dout);
  void drop_recomputable(Block& b);
  Bytes linear_backward(MemoryTimeline& t, const LinearSeams& linear, int64_t rows, const Bytes& dy,
                        const Bytes& x);
  // The start and end of group `group`'s backward: in a split one, of its input half, the
  // linears' weights (`linears`) waiting for W.
  void before_group_backward(MemoryTimeline& t, int group,
                             const std::vector<const LinearSeams*>& linears);
  void after_group_backward(MemoryTimeline& t, int group);
  // A block's linears and its local head counts (derived from them), looked up once.
  struct BlockSeams {
    LinearSeams wqkv, wo, w13, w2;
    int64_t heads = 0, kv_heads = 0;
  };
  ContextParallelMemory::Attention cp_attention(const BlockSeams& s) const;

  ModelArgs args_;
  ActivationCheckpointPolicy policy_;
  ActivationShape shape_;
  std::vector<BlockSeams> seams_;  // [n_layers]: the held layers' linears
  LinearSeams output_seams_;
  ParamHooksMemory& hooks_;
  std::vector<Block> blocks_;
  Bytes rope_, tokens_, final_x_, final_xn_, final_rstd_, dlogits_;
  bool deferring_ = false;
  std::vector<DeferredGradWeight> deferred_;
  size_t deferred_grouped_ = 0;  // deferred_[0, this) belong to a group already ended
};

}  // namespace titan::model
