#include "fp8/float8_producer_fusion.h"

#include "core/check.h"
#include "fp8/float8_linear.h"

namespace titan::fp8 {

namespace {

bool same_scaling(const OperandScaling& a, const OperandScaling& b) {
  return a.granularity == b.granularity && a.format == b.format && a.power_of_two == b.power_of_two;
}

}  // namespace

Float8ProducerFusion::Float8ProducerFusion(const Recipe& recipe, AmaxReduction* activation_amax)
    : recipe_(recipe), activation_amax_(activation_amax) {
  // Every recipe converts the output and grad-input GEMMs; a producer has nothing to write for
  // a high-precision one, and the block only calls it for a converted linear.
  TT_CHECK(!recipe_.output.high_precision && !recipe_.grad_input.high_precision, "fp8 recipe ",
           recipe_.name(), ": its output and grad-input GEMMs must be FP8");
}

ProducerQuantization Float8ProducerFusion::x_quantization() const {
  ProducerQuantization q;
  q.scaling = recipe_.output.a;
  if (q.scaling.granularity == Granularity::Tensorwise) q.reduction = activation_amax_;
  return q;
}

ProducerQuantization Float8ProducerFusion::dy_quantization() const {
  ProducerQuantization q;
  q.scaling = recipe_.grad_input.a;
  if (q.scaling.granularity == Granularity::Tensorwise) {
    q.reduction = activation_amax_;
    q.transposed =
        !recipe_.grad_weight.high_precision && same_scaling(recipe_.grad_weight.a, q.scaling);
  }
  return q;
}

model::ProducedOperands Float8ProducerFusion::x_operands(const Tensor& x, ProducedFloat8 produced) {
  model::ProducedOperands ops;
  ops.source = x;
  ops.output_a = to_gemm_operand(std::move(produced.codes));
  return ops;
}

model::ProducedOperands Float8ProducerFusion::dy_operands(const Tensor& dy,
                                                          ProducedFloat8 produced) const {
  model::ProducedOperands ops;
  ops.source = dy;
  ops.grad_input_a = to_gemm_operand(std::move(produced.codes));
  if (produced.transposed.codes.defined()) {
    ops.grad_weight_a = to_gemm_operand(std::move(produced.transposed));
  }
  return ops;
}

model::ProducedOperands Float8ProducerFusion::rmsnorm_forward(const Tensor& y, const Tensor& rstd,
                                                              const Tensor& x, const Tensor& weight,
                                                              double eps) {
  return x_operands(y, rmsnorm_forward_quantized(y, rstd, x, weight, eps, x_quantization()));
}

model::ProducedOperands Float8ProducerFusion::add_rmsnorm_forward(
    const Tensor& y, const Tensor& rstd, const Tensor& h, const Tensor& residual,
    const Tensor& weight, double eps) {
  return x_operands(
      y, add_rmsnorm_forward_quantized(y, rstd, h, residual, weight, eps, x_quantization()));
}

model::ProducedOperands Float8ProducerFusion::swiglu_forward(const Tensor& out, const Tensor& h13) {
  return x_operands(out, swiglu_forward_quantized(out, h13, x_quantization()));
}

model::ProducedOperands Float8ProducerFusion::swiglu_backward(const Tensor& dh13,
                                                              const Tensor& dout,
                                                              const Tensor& h13) {
  return dy_operands(dh13, swiglu_backward_quantized(dh13, dout, h13, dy_quantization()));
}

model::ProducedOperands Float8ProducerFusion::rmsnorm_backward_add(
    const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
    const Tensor& weight, const Tensor& rstd, const Tensor& dresidual) {
  return dy_operands(dx, rmsnorm_backward_add_quantized(dx, dweight, dy, x, weight, rstd, dresidual,
                                                        dy_quantization()));
}

}  // namespace titan::fp8
