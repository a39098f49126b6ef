// The FP8 linear's side of model/producer_fusion.h: the producers of a converted linear's x and
// dy quantize their output as its GEMMs read it (fp8/producer_quantize.h), and the linear takes
// those operands instead of preparing x and dy again.
//
// Per recipe, what a producer writes besides its output (the GEMMs' table in fp8/recipe.h):
//   forward (x)    the output GEMM's a: x along its features, in every recipe
//   backward (dy)  the grad-input GEMM's a: dy along its features; and, when the grad-weight
//                  GEMM scales dyᵀ as the grad-input one scales dy — tensorwise, one scale for
//                  the whole tensor — dyᵀ's codes from the same pass (a rowwise or 1×128 dyᵀ is
//                  scaled along the tokens, which a row kernel does not see whole)
// A tensorwise amax goes through the activation reduction the linear's own preparation uses
// (cp × tp, else tp), so the codes are those the linear would have computed. What is not
// prepared here (w, wᵀ, xᵀ, a rowwise dyᵀ) the linear prepares as before.
#pragma once

#include "fp8/amax_reduction.h"
#include "fp8/producer_quantize.h"
#include "fp8/recipe.h"
#include "model/producer_fusion.h"

namespace titan::fp8 {

class Float8ProducerFusion final : public model::ProducerFusion {
 public:
  // activation_amax: the reduction of an activation's tensorwise amax (null: none).
  Float8ProducerFusion(const Recipe& recipe, AmaxReduction* activation_amax);

  model::ProducedOperands rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                          const Tensor& weight, double eps) override;
  model::ProducedOperands add_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& h,
                                              const Tensor& residual, const Tensor& weight,
                                              double eps) override;
  model::ProducedOperands swiglu_forward(const Tensor& out, const Tensor& h13) override;
  model::ProducedOperands swiglu_backward(const Tensor& dh13, const Tensor& dout,
                                          const Tensor& h13) override;
  model::ProducedOperands rmsnorm_backward_add(const Tensor& dx, const Tensor& dweight,
                                               const Tensor& dy, const Tensor& x,
                                               const Tensor& weight, const Tensor& rstd,
                                               const Tensor& dresidual) override;

 private:
  // x for the output GEMM; dy for grad_input (and dyᵀ for grad_weight).
  ProducerQuantization x_quantization() const;
  ProducerQuantization dy_quantization() const;
  static model::ProducedOperands x_operands(const Tensor& x, ProducedFloat8 produced);
  model::ProducedOperands dy_operands(const Tensor& dy, ProducedFloat8 produced) const;

  Recipe recipe_;
  AmaxReduction* activation_amax_;
};

}  // namespace titan::fp8
