#include "fp8/float8_linear.h"

#include "core/check.h"
#include "core/gemm.h"
#include "core/memory_tag.h"
#include "core/unverified_gpu_paths.h"
#include "fp8/scaled_gemm.h"

namespace titan::fp8 {

namespace {

constexpr int64_t kFp8DimMultiple = 16;

// Below these sizes quantizing costs more than the FP8 GEMM saves (torchao's auto filter is
// benchmark-driven in the same spirit; these are ours, to revisit with the H100 benchmark):
// a layer is small when both its contraction dim K and its output dim N are.
constexpr int64_t kSmallK = 1024, kSmallN = 4096;

// An operand as the quantize functions take it: 2-D and contiguous; f32 on the CPU (the
// emulation), f32 or bf16 on CUDA.
Tensor operand(const Tensor& t, const char* gemm) {
  TT_CHECK(t.ndim() == 2 &&
               (t.dtype() == DType::F32 || (t.dtype() == DType::BF16 && t.device().is_cuda())),
           "fp8 ", gemm,
           ": needs a 2-D f32 operand (or bf16 on CUDA; the CPU emulation takes f32 "
           "only), got ",
           t, " on ", t.device());
  return t.contiguous();
}

}  // namespace

Float8Gemms::Float8Gemms(Recipe recipe, std::shared_ptr<AmaxReduction> tp_amax,
                         std::shared_ptr<AmaxReduction> activation_amax,
                         std::shared_ptr<const Float8WeightCache> weight_cache)
    : recipe_(std::move(recipe)),
      tp_amax_(std::move(tp_amax)),
      activation_amax_(std::move(activation_amax)),
      weight_cache_(std::move(weight_cache)),
      fusion_(recipe_, activation_amax_ ? activation_amax_.get() : tp_amax_.get()) {}

model::ProducerFusion* Float8Gemms::producer_fusion(const Tensor& output) {
  // On CUDA once the fused producers have run on a GPU (core/unverified_gpu_paths.h); until then
  // the op's kernel writes its output and the linear quantizes it, as before them.
  const bool fuse =
      output.device().is_cuda()
          ? unverified_gpu_path_allowed(UnverifiedGpuPath::Fp8ProducerQuantize)
          : fuse_on_cpu_;
  return fuse ? &fusion_ : nullptr;
}

AmaxReduction* Float8Gemms::amax_reduction(const OperandScaling& s, OperandKind kind) const {
  // Along the features only a tensorwise amax spans ranks; a row's is its own token's.
  if (s.granularity != Granularity::Tensorwise) return nullptr;
  if (kind == OperandKind::Activation && activation_amax_) return activation_amax_.get();
  return tp_amax_.get();
}

Float8Tensor Float8Gemms::quantize(const Tensor& x, const OperandScaling& s,
                                   OperandKind kind) const {
  // Without a reduction, amax, scales and codes come from one call (one fused kernel on CUDA).
  AmaxReduction* reduction = amax_reduction(s, kind);
  if (reduction == nullptr) return fp8::quantize(x, s.granularity, s.format, s.power_of_two);
  Tensor amax = compute_amax(x, s.granularity);
  reduction->reduce_max(amax);
  return quantize_with_scales(x, scales_from_amax(amax, s.format, s.power_of_two), s.granularity,
                              s.format);
}

Float8Tensor Float8Gemms::quantize_transposed(const Tensor& x, const OperandScaling& s,
                                              OperandKind kind) const {
  // fp8::quantize_transposed computes its own amax, so a tensorwise scale that must first be
  // reduced is applied to x instead and the codes transposed byte for byte: under one scale
  // that is exactly what quantizing xᵀ gives (fp8::transpose_tensorwise).
  if (amax_reduction(s, kind) != nullptr) return transpose_tensorwise(quantize(x, s, kind));
  return fp8::quantize_transposed(x, s.granularity, s.format, s.power_of_two);
}

const Float8Tensor* Float8Gemms::gathered_weight(const Tensor& w) const {
  if (!weight_cache_) return nullptr;
  // With the float8 all-gather on, every converted weight arrives as codes: a miss would mean
  // quantizing twice, silently, so it is a bug.
  const Float8Tensor* codes = weight_cache_->find(w);
  TT_CHECK(codes != nullptr, "FSDP float8 all-gather: the weight ", w,
           " of an FP8 linear was not gathered as e4m3");
  return codes;
}

// A tensorwise scale is shared by every row (and every tp rank); 128×128 tiles span rows, so
// such an operand (a weight) is never cut.
model::GemmOperand to_gemm_operand(Float8Tensor q) {
  model::GemmOperand op;
  op.values = std::move(q.codes);
  const bool per_row =
      q.granularity == Granularity::Rowwise || q.granularity == Granularity::Block1x128;
  (per_row ? op.row_scales : op.shared_scales) = std::move(q.scales);
  op.scaling = 1 + static_cast<int>(q.granularity);
  op.row_blocks = q.granularity != Granularity::Block128x128;
  return op;
}

namespace {

// A GemmOperand back as the Float8Tensor it was made from.
Float8Tensor to_float8(const model::GemmOperand& op) {
  TT_CHECK(op.scaling > 0, "fp8 GEMM: operand ", op.values, " was not quantized");
  Float8Tensor q;
  q.codes = op.values;
  q.scales = op.row_scales.defined() ? op.row_scales : op.shared_scales;
  q.granularity = static_cast<Granularity>(op.scaling - 1);
  q.format = op.values.dtype() == DType::E5M2 ? Format::E5M2 : Format::E4M3;
  return q;
}

}  // namespace

const GemmScaling& Float8Gemms::scaling(model::GemmKind gemm) const {
  switch (gemm) {
    case model::GemmKind::Output: return recipe_.output;
    case model::GemmKind::GradInput: return recipe_.grad_input;
    case model::GemmKind::GradWeight: return recipe_.grad_weight;
  }
  return recipe_.output;
}

// What the GEMMs allocate is their operands' FP8 codes and scales (and the amaxes they come
// from): tagged as FP8 cache rather than as the activations of the block that runs them.
model::GemmOperand Float8Gemms::prepare_a(model::GemmKind gemm, const Tensor& t) {
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  const GemmScaling& g = scaling(gemm);
  if (g.high_precision) return model::GemmOperand::the_input(t);
  const char* name = model::gemm_kind_name(gemm);
  // x and dy are scaled along their features as they are; grad_weight contracts over the
  // tokens, so it takes dyᵀ [out, T].
  if (gemm == model::GemmKind::GradWeight) {
    return to_gemm_operand(quantize_transposed(operand(t, name), g.a, OperandKind::Activation));
  }
  return to_gemm_operand(quantize(operand(t, name), g.a, OperandKind::Activation));
}

model::GemmOperand Float8Gemms::prepare_b(model::GemmKind gemm, const Tensor& t) {
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  const GemmScaling& g = scaling(gemm);
  if (g.high_precision) return model::GemmOperand::plain(t);
  const char* name = model::gemm_kind_name(gemm);
  switch (gemm) {
    case model::GemmKind::Output: {
      const Float8Tensor* gathered = gathered_weight(t);
      return to_gemm_operand(gathered ? *gathered
                                      : quantize(operand(t, name), g.b, OperandKind::Weight));
    }
    case model::GemmKind::GradInput: {
      // dx [T, in] = dy [T, out] · w [out, in]: the contraction runs over out, so w is quantized
      // transposed, [in, out], from its high-precision values. An FP8-gathered weight is
      // tensorwise-scaled: its transposed codes are exactly that.
      const Float8Tensor* gathered = gathered_weight(t);
      return to_gemm_operand(gathered
                                 ? transpose_tensorwise(*gathered)
                                 : quantize_transposed(operand(t, name), g.b, OperandKind::Weight));
    }
    case model::GemmKind::GradWeight:
      // dw [out, in] += dyᵀ [out, T] · x [T, in]: xᵀ [in, T], scaled along the tokens.
      return to_gemm_operand(quantize_transposed(operand(t, name), g.b, OperandKind::Activation));
  }
  return {};
}

void Float8Gemms::run(model::GemmKind gemm, const Tensor& out, const model::GemmOperand& a,
                      const model::GemmOperand& b) {
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  const GemmScaling& g = scaling(gemm);
  if (g.high_precision) return model::high_precision_gemm(gemm, out, a.values, b.values);
  scaled_gemm(to_float8(a), to_float8(b), out, gemm == model::GemmKind::GradWeight,
              g.fast_accumulation);
}

Float8Conversion convert_to_float8(model::Transformer& model, const Float8Options& options,
                                   std::shared_ptr<AmaxReduction> tp_amax,
                                   std::shared_ptr<AmaxReduction> activation_amax) {
  Float8Conversion result;
  if (!options.enabled) return result;
  auto gemms = std::make_shared<Float8Gemms>(make_recipe(options.recipe), std::move(tp_amax),
                                             std::move(activation_amax), options.weight_cache);
  for (model::Linear* linear : model.linears()) {
    bool filtered = false;
    for (const std::string& f : options.filter_fqns)
      filtered |= linear->fqn().find(f) != std::string::npos;
    if (filtered) continue;
    const Shape local = linear->weight().local_shape();  // [out, in] after tp sharding
    const int64_t tp = linear->weight().slice.count;
    const int64_t N = local[0], K = local[1];
    const bool misaligned = N % kFp8DimMultiple != 0 || K % kFp8DimMultiple != 0;
    if (misaligned && !options.auto_filter_small_kn) {
      input_error("float8: layer '", linear->fqn(), "' has FP8 GEMM dims ", N, " × ", K,
                  " (out × in after tp ", tp, "), not multiples of ", kFp8DimMultiple,
                  " as FP8 GEMMs need; add it to float8.filter_fqns, choose a tp that keeps them "
                  "multiples of 16, or set float8.auto_filter_small_kn: true");
    }
    if (options.auto_filter_small_kn && (misaligned || (K <= kSmallK && N <= kSmallN))) {
      result.auto_filtered.push_back(detail::concat(
          "float8: '", linear->fqn(), "' stays in high precision: ", N, " × ", K,
          " (out × in after tp ", tp, ") ",
          misaligned ? "is not a multiple of 16" : "is too small for FP8 to pay off"));
      continue;
    }
    linear->set_gemms(gemms);
    result.converted.push_back(linear->fqn());
    result.weights.push_back(&linear->weight());
  }
  return result;
}

}  // namespace titan::fp8
