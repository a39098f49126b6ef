#include "fp8/float8_memory.h"

#include <algorithm>

namespace titan::fp8 {

namespace {

using model::GemmKind;
using model::PreparedOperand;

double d(int64_t v) { return static_cast<double>(v); }

// What a row block of the operand carries with it (GemmOperand::row_scales), per row.
double row_scale_bytes(Granularity granularity, int64_t cols) {
  switch (granularity) {
    case Granularity::Rowwise: return 4;
    case Granularity::Block1x128: return 4 * d(scale_blocks(cols));
    case Granularity::Tensorwise:
    case Granularity::Block128x128: return 0;
  }
  return 0;
}

PreparedOperand operand(int64_t cols, Granularity granularity) {
  PreparedOperand op;
  op.row_bytes = d(cols);  // one byte per code
  op.row_scale_bytes = row_scale_bytes(granularity, cols);
  op.plain = false;
  return op;
}

}  // namespace

double scale_bytes(Granularity granularity, int64_t rows, int64_t cols) {
  return 4 * d(scales_shape(granularity, rows, cols).numel());
}

Float8GemmsMemory::Float8GemmsMemory(const Float8MemoryOptions& options)
    : recipe_(make_recipe(options.recipe)), options_(options) {}

const GemmScaling& Float8GemmsMemory::scaling(GemmKind gemm) const {
  switch (gemm) {
    case GemmKind::Output: return recipe_.output;
    case GemmKind::GradInput: return recipe_.grad_input;
    case GemmKind::GradWeight: return recipe_.grad_weight;
  }
  return recipe_.output;
}

bool Float8GemmsMemory::reduces_amax(const OperandScaling& s, OperandKind kind) const {
  return s.granularity == Granularity::Tensorwise &&
         (options_.tp_amax || (kind == OperandKind::Activation && options_.activation_amax));
}

PreparedOperand Float8GemmsMemory::quantize(MemoryTimeline& t, int64_t rows, int64_t cols,
                                            const OperandScaling& s, OperandKind kind) const {
  const double scales = scale_bytes(s.granularity, rows, cols);
  PreparedOperand op = operand(cols, s.granularity);
  if (options_.cuda && !reduces_amax(s, kind)) {
    // quantize_cuda: codes and scales, then (tensorwise) a one-float amax while they are made.
    const MemoryTimeline::Bytes codes = t.hold(d(rows) * d(cols));
    op.held = {t.hold(scales), codes};
    if (s.granularity == Granularity::Tensorwise) t.hold(4);
    return op;
  }
  // compute_amax → (the tp and cp reductions) → scales_from_amax → quantize_with_scales; the amax
  // goes.
  const MemoryTimeline::Bytes amax = t.hold(scales);
  const MemoryTimeline::Bytes scale = t.hold(scales);
  op.held = {scale, t.hold(d(rows) * d(cols))};  // {scales, codes}, as every quantize leaves them
  return op;
}

PreparedOperand Float8GemmsMemory::quantize_transposed(MemoryTimeline& t, int64_t rows,
                                                       int64_t cols, const OperandScaling& s,
                                                       OperandKind kind) const {
  if (reduces_amax(s, kind)) {
    // The codes of x under the reduced scale, byte-transposed; the untransposed codes go.
    PreparedOperand q = quantize(t, rows, cols, s, kind);
    PreparedOperand op = operand(rows, s.granularity);
    op.held = {q.held[0], t.hold(d(rows) * d(cols))};  // the scale shared, the codes new
    return op;
  }
  if (options_.cuda) {
    // quantize_transposed_cuda: one kernel reads x tile by tile; codes, scales and an amax.
    PreparedOperand op = operand(rows, s.granularity);
    op.held.push_back(t.hold(d(rows) * d(cols)));
    op.held.push_back(t.hold(scale_bytes(s.granularity, cols, rows)));
    const MemoryTimeline::Bytes amax =
        t.hold(s.granularity == Granularity::Tensorwise ? 4 : 4 * d(cols));
    return op;
  }
  // The CPU transposes x in f32 first.
  MemoryTimeline::Bytes transposed = t.hold(d(rows) * d(cols) * 4);
  return quantize(t, cols, rows, s, kind);
}

PreparedOperand Float8GemmsMemory::prepare_a(MemoryTimeline& t, GemmKind gemm, int64_t rows,
                                             int64_t cols, double element_bytes) {
  MemoryTimeline::Tag tag(t, MemoryCategory::Fp8Cache);
  const GemmScaling& g = scaling(gemm);
  if (g.high_precision) {
    PreparedOperand plain;
    plain.row_bytes = d(cols) * element_bytes;
    return plain;
  }
  if (gemm == GemmKind::GradWeight)
    return quantize_transposed(t, rows, cols, g.a, OperandKind::Activation);
  return quantize(t, rows, cols, g.a, OperandKind::Activation);
}

PreparedOperand Float8GemmsMemory::prepare_b(MemoryTimeline& t, GemmKind gemm, int64_t rows,
                                             int64_t cols, double element_bytes) {
  MemoryTimeline::Tag tag(t, MemoryCategory::Fp8Cache);
  const GemmScaling& g = scaling(gemm);
  if (g.high_precision) {
    PreparedOperand plain;
    plain.row_bytes = d(cols) * element_bytes;
    return plain;
  }
  switch (gemm) {
    case GemmKind::Output:
      // A weight gathered as codes is used as it arrived.
      if (options_.gathered_weights) return operand(cols, Granularity::Tensorwise);
      return quantize(t, rows, cols, g.b, OperandKind::Weight);
    case GemmKind::GradInput:
      if (options_.gathered_weights) {
        PreparedOperand op = operand(rows, Granularity::Tensorwise);
        op.held.push_back(t.hold(d(rows) * d(cols)));  // transpose_tensorwise's codes
        return op;
      }
      return quantize_transposed(t, rows, cols, g.b, OperandKind::Weight);
    case GemmKind::GradWeight:
      return quantize_transposed(t, rows, cols, g.b, OperandKind::Activation);
  }
  return {};
}

void Float8GemmsMemory::run(MemoryTimeline& t, GemmKind gemm, int64_t m, int64_t n, int64_t k) {
  MemoryTimeline::Tag tag(t, MemoryCategory::Fp8Cache);
  const GemmScaling& g = scaling(gemm);
  if (g.high_precision) return;
  if (options_.cuda) {
    // cublaslt_dequant_scales: each operand's scales laid out as cuBLASLt reads them.
    const MemoryTimeline::Bytes a = t.hold(scale_bytes(g.a.granularity, m, k));
    const MemoryTimeline::Bytes b = t.hold(scale_bytes(g.b.granularity, n, k));
    return;
  }
  // scaled_gemm's emulation: the f32 partial, then both operands decoded to f32 for each slice
  // of K (the first slice is the widest).
  const bool block =
      g.a.granularity == Granularity::Block1x128 || g.a.granularity == Granularity::Block128x128;
  const int64_t width = block ? std::min<int64_t>(kBlock, k) : k;
  const MemoryTimeline::Bytes partial = t.hold(d(m) * d(n) * 4);
  const MemoryTimeline::Bytes a = t.hold(d(m) * d(width) * 4);
  const MemoryTimeline::Bytes b = t.hold(d(n) * d(width) * 4);
}

void Float8AllGatherMemory::update(MemoryTimeline& t, int64_t weights,
                                   MemoryTimeline::Bytes& kept) const {
  MemoryTimeline::Tag tag(t, MemoryCategory::Fp8Cache);
  // One amax per weight packed for one collective, each filled from a one-float amax of its
  // shard; the scales computed from them; each weight's scale cloned out of those, one by one
  // in place of its previous one.
  const MemoryTimeline::Bytes amax = t.hold(4 * d(weights));
  { const MemoryTimeline::Bytes one = t.hold(4); }
  const MemoryTimeline::Bytes scales = t.hold(4 * d(weights));
  if (kept.held()) {
    const MemoryTimeline::Bytes clone = t.hold(4);
  } else {
    kept = t.hold(4 * d(weights));
  }
}

void Float8AllGatherMemory::encode(MemoryTimeline& t, int64_t elements) const {
  // quantize_with_scales of the shard as one row: its codes, copied into the send buffer.
  const MemoryTimeline::Bytes codes = t.hold(d(elements));
}

MemoryTimeline::Bytes Float8AllGatherMemory::decode(MemoryTimeline& t, int64_t rows, int64_t cols,
                                                    double compute_bytes) const {
  MemoryTimeline::Tag tag(t, MemoryCategory::GatheredParameters);
  // dequantize gives f32; a bf16 compute dtype is a cast of it, and the f32 goes.
  MemoryTimeline::Bytes value = t.hold(d(rows) * d(cols) * 4);
  if (compute_bytes != 4) value = t.hold(d(rows) * d(cols) * compute_bytes);
  return value;
}

}  // namespace titan::fp8
