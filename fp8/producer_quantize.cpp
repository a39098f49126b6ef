#include "fp8/producer_quantize.h"

#include <cstdint>
#include <initializer_list>

#include "core/check.h"
#include "core/memory_tag.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/swiglu.h"

namespace titan::fp8 {

namespace {

void check_quantization(const ProducerQuantization& q) {
  TT_CHECK(!q.transposed || q.scaling.granularity == Granularity::Tensorwise,
           "producer quantization: the transpose's codes come with a tensorwise scale only, not ",
           granularity_name(q.scaling.granularity));
}

#if TITAN_CUDA
// Whether the row kernels can quantize an output of `cols` columns: on CUDA, rows of whole
// 16-byte packs (every FP8 linear's dims are multiples of 16), contiguous, aligned tensors,
// and scales along a row (a 128×128 tile spans rows).
bool rows_fuse(const ProducerQuantization& q, int64_t cols,
               std::initializer_list<const Tensor*> tensors) {
  if (q.scaling.granularity == Granularity::Block128x128 || cols % 16 != 0) return false;
  for (const Tensor* t : tensors) {
    if (!t->device().is_cuda() || !t->is_contiguous() ||
        reinterpret_cast<uintptr_t>(t->raw_data()) % 16 != 0) {
      return false;
    }
  }
  return true;
}

// What the row epilogues write into, for an output y [rows, cols].
RowQuantizeOutputs row_outputs(const Tensor& y, const ProducerQuantization& q) {
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  RowQuantizeOutputs out;
  out.scaling = q.scaling;
  const int64_t rows = y.size(0), cols = y.size(1);
  if (q.scaling.granularity == Granularity::Tensorwise) {
    out.amax = Tensor::zeros({1}, DType::F32, y.device());
  } else {
    out.codes = Tensor::empty(
        {rows, cols}, q.scaling.format == Format::E4M3 ? DType::E4M3 : DType::E5M2, y.device());
    out.scales =
        Tensor::empty(scales_shape(q.scaling.granularity, rows, cols), DType::F32, y.device());
  }
  return out;
}
#endif

// The tensorwise codes of y (and its transpose) from y's amax [1], reduced first.
ProducedFloat8 from_amax(const Tensor& y, const Tensor& amax, const ProducerQuantization& q) {
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  if (q.reduction != nullptr) q.reduction->reduce_max(amax);
  ProducedFloat8 r;
  r.codes = quantize_tensorwise_from_amax(y, amax, q.scaling.format, q.scaling.power_of_two,
                                          q.transposed ? &r.transposed : nullptr);
  return r;
}

#if TITAN_CUDA
// What the row epilogues wrote, as the codes they stand for.
ProducedFloat8 finish_rows(const Tensor& y, const RowQuantizeOutputs& out,
                           const ProducerQuantization& q) {
  if (q.scaling.granularity == Granularity::Tensorwise) return from_amax(y, out.amax, q);
  ProducedFloat8 r;
  r.codes.codes = out.codes;
  r.codes.scales = out.scales;
  r.codes.granularity = q.scaling.granularity;
  r.codes.format = q.scaling.format;
  return r;
}
#endif

}  // namespace

ProducedFloat8 quantize_output(const Tensor& y, const ProducerQuantization& q) {
  check_quantization(q);
  if (q.scaling.granularity == Granularity::Tensorwise) {
    Tensor amax;
    {
      MemoryTagScope tag(MemoryCategory::Fp8Cache);
      amax = compute_amax(y, Granularity::Tensorwise);
    }
    return from_amax(y, amax, q);
  }
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  ProducedFloat8 r;
  r.codes = quantize(y, q.scaling.granularity, q.scaling.format, q.scaling.power_of_two);
  return r;
}

ProducedFloat8 rmsnorm_forward_quantized(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                         const Tensor& weight, double eps,
                                         const ProducerQuantization& q) {
  check_quantization(q);
#if TITAN_CUDA
  if (rows_fuse(q, x.size(1), {&y, &x, &weight})) {
    check_tensor(y, "rmsnorm_forward_quantized y", x.shape(), x.dtype());
    const RowQuantizeOutputs out = row_outputs(y, q);
    rmsnorm_forward_quantized_cuda(y, rstd, x, nullptr, weight, eps, out);
    return finish_rows(y, out, q);
  }
#endif
  model::rmsnorm_forward(y, rstd, x, weight, eps);
  return quantize_output(y, q);
}

ProducedFloat8 add_rmsnorm_forward_quantized(const Tensor& y, const Tensor& rstd, const Tensor& h,
                                             const Tensor& residual, const Tensor& weight,
                                             double eps, const ProducerQuantization& q) {
  check_quantization(q);
#if TITAN_CUDA
  if (rows_fuse(q, h.size(1), {&y, &h, &residual, &weight})) {
    check_tensor(y, "add_rmsnorm_forward_quantized y", h.shape(), h.dtype());
    check_tensor(residual, "add_rmsnorm_forward_quantized residual", h.shape(), h.dtype());
    const RowQuantizeOutputs out = row_outputs(y, q);
    rmsnorm_forward_quantized_cuda(y, rstd, h, &residual, weight, eps, out);
    return finish_rows(y, out, q);
  }
#endif
  model::add_rmsnorm_forward(y, rstd, h, residual, weight, eps);
  return quantize_output(y, q);
}

ProducedFloat8 swiglu_forward_quantized(const Tensor& out, const Tensor& h13,
                                        const ProducerQuantization& q) {
  check_quantization(q);
#if TITAN_CUDA
  if (rows_fuse(q, out.size(1), {&out, &h13})) {
    check_tensor(out, "swiglu_forward_quantized out", {h13.size(0), h13.size(1) / 2}, h13.dtype());
    const RowQuantizeOutputs rows = row_outputs(out, q);
    swiglu_forward_quantized_cuda(out, h13, rows);
    return finish_rows(out, rows, q);
  }
#endif
  model::swiglu_forward(out, h13);
  return quantize_output(out, q);
}

ProducedFloat8 swiglu_backward_quantized(const Tensor& dh13, const Tensor& dout, const Tensor& h13,
                                         const ProducerQuantization& q) {
  check_quantization(q);
#if TITAN_CUDA
  // dh13's rows are [dh1 | dh3], 2F wide, so the packs of each half must be whole: F % 16.
  if (rows_fuse(q, dout.size(1), {&dh13, &dout, &h13})) {
    check_tensor(dh13, "swiglu_backward_quantized dh13", h13.shape(), h13.dtype());
    check_tensor(dout, "swiglu_backward_quantized dout", {h13.size(0), h13.size(1) / 2},
                 h13.dtype());
    const RowQuantizeOutputs rows = row_outputs(dh13, q);
    swiglu_backward_quantized_cuda(dh13, dout, h13, rows);
    return finish_rows(dh13, rows, q);
  }
#endif
  model::swiglu_backward(dh13, dout, h13);
  return quantize_output(dh13, q);
}

ProducedFloat8 rmsnorm_backward_add_quantized(const Tensor& dx, const Tensor& dweight,
                                              const Tensor& dy, const Tensor& x,
                                              const Tensor& weight, const Tensor& rstd,
                                              const Tensor& dresidual,
                                              const ProducerQuantization& q) {
  check_quantization(q);
#if TITAN_CUDA
  if (rows_fuse(q, x.size(1), {&dx, &dy, &x, &weight, &dresidual})) {
    for (const Tensor* t : {&dx, &dy, &dresidual}) {
      check_tensor(*t, "rmsnorm_backward_add_quantized", x.shape(), x.dtype());
    }
    const RowQuantizeOutputs out = row_outputs(dx, q);
    rmsnorm_backward_add_quantized_cuda(dx, dweight, dy, x, weight, rstd, &dresidual, out);
    return finish_rows(dx, out, q);
  }
#endif
  model::rmsnorm_backward_add(dx, dweight, dy, x, weight, rstd, dresidual);
  return quantize_output(dx, q);
}

}  // namespace titan::fp8
