// fp8/'s part of a rank's memory estimate (core/memory_timeline.h): what the FP8 linear's GEMMs
// (float8_linear.cpp) and FSDP's float8 all-gather codec (float8_all_gather.cpp) allocate,
// replayed in their order on a MemoryTimeline, all of it FP8 cache except where the caller's tag
// says otherwise (the codec's send codes are FSDP's communication buffers).
//
// A converted linear's GEMM prepares each operand once — its FP8 codes [rows, cols] (one byte
// each) and scales, from a transient amax shaped like the scales — and lets both go after the
// GEMM. A transposed operand is quantized from a transposed f32 copy on the CPU (one kernel on
// CUDA), or, for a tensorwise operand whose amax is reduced over tp, byte-transposed from the
// codes. The CPU emulation of the FP8 GEMM decodes both operands to f32 and sums into an f32
// partial [M, N] (per 128-wide slice of K for block scaling): that is the CPU's largest FP8
// buffer, and it does not exist on CUDA, where cuBLASLt reads the codes.
//
// With the float8 all-gather, each gathered group keeps its weights' codes (FP8 cache) beside
// their decoded values (gathered parameters) until the group is released, and every coded
// weight keeps its f32 scale for good.
#pragma once

#include <cstdint>

#include "fp8/amax_reduction.h"
#include "fp8/recipe.h"
#include "model/activation_memory.h"

namespace titan::fp8 {

struct Float8MemoryOptions {
  RecipeKind recipe = RecipeKind::Tensorwise;
  bool tp_amax = false;           // tensorwise amaxes reduced over tp (tp > 1)
  bool activation_amax = false;   // an activation's tensorwise amax reduced over cp × tp (cp > 1)
  bool gathered_weights = false;  // the weights arrive as codes (FSDP float8 all-gather)
  bool cuda = false;
};

// Float8Gemms (float8_linear.h) as allocations.
class Float8GemmsMemory final : public model::GemmsMemory {
 public:
  explicit Float8GemmsMemory(const Float8MemoryOptions& options);
  model::PreparedOperand prepare_a(MemoryTimeline& t, model::GemmKind gemm, int64_t rows,
                                   int64_t cols, double element_bytes) override;
  model::PreparedOperand prepare_b(MemoryTimeline& t, model::GemmKind gemm, int64_t rows,
                                   int64_t cols, double element_bytes) override;
  void run(MemoryTimeline& t, model::GemmKind gemm, int64_t m, int64_t n, int64_t k) override;

 private:
  const GemmScaling& scaling(model::GemmKind gemm) const;
  // x [rows, cols] quantized as it is, or transposed to [cols, rows].
  model::PreparedOperand quantize(MemoryTimeline& t, int64_t rows, int64_t cols,
                                  const OperandScaling& s, OperandKind kind) const;
  model::PreparedOperand quantize_transposed(MemoryTimeline& t, int64_t rows, int64_t cols,
                                             const OperandScaling& s, OperandKind kind) const;
  bool reduces_amax(const OperandScaling& s, OperandKind kind) const;

  Recipe recipe_;
  Float8MemoryOptions options_;
};

// Float8AllGatherCodec (float8_all_gather.h) as allocations.
class Float8AllGatherMemory {
 public:
  // update(): the scales of `weights` weights, one collective; each weight's f32 scale is then
  // kept (FP8 cache) in place of its previous one. `kept`: those scales, held from their first
  // update on.
  void update(MemoryTimeline& t, int64_t weights, MemoryTimeline::Bytes& kept) const;
  // encode(): a shard of `elements` as codes, held for the copy into the send buffer (under the
  // caller's tag).
  void encode(MemoryTimeline& t, int64_t elements) const;
  // decode(): the gathered codes [rows, cols] as values in `compute_bytes`, kept by the caller.
  MemoryTimeline::Bytes decode(MemoryTimeline& t, int64_t rows, int64_t cols,
                               double compute_bytes) const;
};

// The scales a recipe's operand [rows, cols] carries, in bytes (f32 each).
double scale_bytes(Granularity granularity, int64_t rows, int64_t cols);

}  // namespace titan::fp8
