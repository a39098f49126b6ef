// How the op that produces a linear's input writes what that linear's GEMMs read
// (docs/architecture.md#departs-2): the model asks the consumer linear, and an op that can is
// fused with the preparation of the operand.
//
// A linear prepares its operands itself (LinearGemms::prepare_a/b): FP8 GEMMs read the input x
// and the output gradient dy as codes, which costs a pass over a tensor the op before has just
// written (on CUDA an amax kernel, a cast kernel and a transposed cast for backward). The op
// that writes x — RMSNorm, SwiGLU — or dy — dSwiGLU, the norm's backward — can write the codes
// as it goes. But model/ knows nothing of FP8 (decision 2), so it cannot call such a kernel: it
// calls the ProducerFusion its consumer's LinearGemms offers, which fp8/ implements, and hands
// the ProducedOperands to the linear's forward or backward. A linear with nothing to fuse (high
// precision) offers none, and the block runs the op as it is; so does a LinearGemms for a tensor
// on a device where fusing does not pay.
//
// Every entry computes exactly what the plain op of model/ops/ computes (the same bits) and,
// besides, the operands the consumer's GEMMs would prepare from that output: the same codes and
// scales that prepare_a would give, so that a linear reading them computes what it computes
// without them.
#pragma once

#include "core/tensor.h"
#include "model/linear.h"

namespace titan::model {

// Operands prepared from `source` by the op that wrote it, for the linear that reads it: each
// one exactly what that linear's LinearGemms::prepare_a would give for `source`, or undefined.
struct ProducedOperands {
  Tensor source;              // the producer's output: x [T, in] or dy [T, out]
  GemmOperand output_a;       // source as the output GEMM's a (x)
  GemmOperand grad_input_a;   // source as the grad-input GEMM's a (dy)
  GemmOperand grad_weight_a;  // sourceᵀ as the grad-weight GEMM's a (dyᵀ [out, T])

  // The operand prepared for `gemm`'s a when t is the source itself (Tensor::is_same), else
  // null: a style that hands the GEMM another tensor (a tp-gathered one) prepares
  // that one itself.
  const GemmOperand* a_for(GemmKind gemm, const Tensor& t) const;
};

class ProducerFusion {
 public:
  virtual ~ProducerFusion() = default;
  // Forward producers of x: model/ops' op, and x as the consumer's output GEMM reads it.
  virtual ProducedOperands rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                           const Tensor& weight, double eps) = 0;
  virtual ProducedOperands add_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& h,
                                               const Tensor& residual, const Tensor& weight,
                                               double eps) = 0;
  virtual ProducedOperands swiglu_forward(const Tensor& out, const Tensor& h13) = 0;
  // Backward producers of dy: the op, and dy as the consumer's grad-input GEMM reads it (and
  // dyᵀ as its grad-weight GEMM does, where one pass can write both).
  virtual ProducedOperands swiglu_backward(const Tensor& dh13, const Tensor& dout,
                                           const Tensor& h13) = 0;
  virtual ProducedOperands rmsnorm_backward_add(const Tensor& dx, const Tensor& dweight,
                                                const Tensor& dy, const Tensor& x,
                                                const Tensor& weight, const Tensor& rstd,
                                                const Tensor& dresidual) = 0;
};

// The ops as a block calls them for the linear that reads their output: fused through that
// linear's ProducerFusion when it offers one for these tensors, else the plain op of
// model/ops/ with nothing prepared.
ProducedOperands rmsnorm_forward_for(const Linear& consumer, const Tensor& y, const Tensor& rstd,
                                     const Tensor& x, const Tensor& weight, double eps);
ProducedOperands add_rmsnorm_forward_for(const Linear& consumer, const Tensor& y,
                                         const Tensor& rstd, const Tensor& h,
                                         const Tensor& residual, const Tensor& weight, double eps);
ProducedOperands swiglu_forward_for(const Linear& consumer, const Tensor& out, const Tensor& h13);
ProducedOperands swiglu_backward_for(const Linear& consumer, const Tensor& dh13, const Tensor& dout,
                                     const Tensor& h13);
ProducedOperands rmsnorm_backward_add_for(const Linear& consumer, const Tensor& dx,
                                          const Tensor& dweight, const Tensor& dy, const Tensor& x,
                                          const Tensor& weight, const Tensor& rstd,
                                          const Tensor& dresidual);

}  // namespace titan::model
