// The ops that produce an FP8 linear's input or output gradient, each with its output quantized
// as the linear's GEMM reads it: RMSNorm (with or without the residual add) and SwiGLU for x,
// dSwiGLU and the norm's backward for dy. fp8/float8_producer_fusion.h offers them to model/
// (model/producer_fusion.h).
//
// The CPU twin of each is the composition: model/ops' op, then quantize_output of what it wrote.
// On CUDA the op's own row kernels (model/ops/*_rows.cuh) run with the quantization in each
// row's epilogue (fp8/cuda/producer_quantize.cu):
//   rowwise, 1×128   one kernel: the op's row, its amax (rowwise) or its blocks' (1×128), the
//                    scales and the codes; the row is re-read from L1/L2, not from HBM
//   tensorwise       the op's kernel also takes the amax of what it stores; then, after the
//                    reduction over tp (and cp), one pass writes the codes — and, when asked,
//                    the codes of the transpose, under the same scale, from the same reads
// Rows that are not whole 16-byte packs, and 128×128 tiles (weights only), take the
// composition on CUDA too. The output is written in high precision either way: the linear's
// backward (or a recompute) reads it. Codes and scales are quantize_output's bits exactly.
#pragma once

#include "core/tensor.h"
#include "fp8/amax_reduction.h"
#include "fp8/recipe.h"

namespace titan::fp8 {

// How a producer's output is to be quantized.
struct ProducerQuantization {
  OperandScaling scaling;              // along the output's columns
  bool transposed = false;             // also the transpose's codes (tensorwise only)
  AmaxReduction* reduction = nullptr;  // tensorwise: the amax goes through it first
};

struct ProducedFloat8 {
  Float8Tensor codes;       // the output [rows, cols], scaled along its columns
  Float8Tensor transposed;  // its transpose [cols, rows] under the same scale, when asked
};

// The quantization of an output y on its own: the second half of each CPU twin.
ProducedFloat8 quantize_output(const Tensor& y, const ProducerQuantization& q);

// model/ops' op (same arguments, same bits), and its output quantized as quantize_output would.
ProducedFloat8 rmsnorm_forward_quantized(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                         const Tensor& weight, double eps,
                                         const ProducerQuantization& q);
ProducedFloat8 add_rmsnorm_forward_quantized(const Tensor& y, const Tensor& rstd, const Tensor& h,
                                             const Tensor& residual, const Tensor& weight,
                                             double eps, const ProducerQuantization& q);
ProducedFloat8 swiglu_forward_quantized(const Tensor& out, const Tensor& h13,
                                        const ProducerQuantization& q);
ProducedFloat8 swiglu_backward_quantized(const Tensor& dh13, const Tensor& dout, const Tensor& h13,
                                         const ProducerQuantization& q);
ProducedFloat8 rmsnorm_backward_add_quantized(const Tensor& dx, const Tensor& dweight,
                                              const Tensor& dy, const Tensor& x,
                                              const Tensor& weight, const Tensor& rstd,
                                              const Tensor& dresidual,
                                              const ProducerQuantization& q);

#if TITAN_CUDA
// The fused kernels (fp8/cuda/producer_quantize.cu): each op's row kernels with an epilogue
// that writes, per row, into `out` — rowwise and 1×128: codes [rows, cols] and scales;
// tensorwise: the amax of the whole output into amax [1] (zeroed by the caller).
struct RowQuantizeOutputs {
  OperandScaling scaling;
  Tensor codes, scales;  // rowwise, 1×128
  Tensor amax;           // tensorwise
};
void rmsnorm_forward_quantized_cuda(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                    const Tensor* residual, const Tensor& weight, double eps,
                                    const RowQuantizeOutputs& out);
void rmsnorm_backward_add_quantized_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                                         const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                         const Tensor* dresidual, const RowQuantizeOutputs& out);
void swiglu_forward_quantized_cuda(const Tensor& out, const Tensor& h13,
                                   const RowQuantizeOutputs& q);
void swiglu_backward_quantized_cuda(const Tensor& dh13, const Tensor& dout, const Tensor& h13,
                                    const RowQuantizeOutputs& q);
#endif

}  // namespace titan::fp8
