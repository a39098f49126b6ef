#include "model/producer_fusion.h"

#include "model/ops/rmsnorm.h"
#include "model/ops/swiglu.h"

namespace titan::model {

const GemmOperand* ProducedOperands::a_for(GemmKind gemm, const Tensor& t) const {
  if (!source.defined() || !t.is_same(source)) {
    return nullptr;
  }
  const GemmOperand* op = nullptr;
  switch (gemm) {
    case GemmKind::Output: op = &output_a; break;
    case GemmKind::GradInput: op = &grad_input_a; break;
    case GemmKind::GradWeight: op = &grad_weight_a; break;
  }
  return op != nullptr && op->values.defined() ? op : nullptr;
}

ProducedOperands rmsnorm_forward_for(const Linear& consumer, const Tensor& y, const Tensor& rstd,
                                     const Tensor& x, const Tensor& weight, double eps) {
  if (ProducerFusion* fusion = consumer.producer_fusion(y)) {
    return fusion->rmsnorm_forward(y, rstd, x, weight, eps);
  }
  rmsnorm_forward(y, rstd, x, weight, eps);
  return {};
}

ProducedOperands add_rmsnorm_forward_for(const Linear& consumer, const Tensor& y,
                                         const Tensor& rstd, const Tensor& h,
                                         const Tensor& residual, const Tensor& weight, double eps) {
  if (ProducerFusion* fusion = consumer.producer_fusion(y)) {
    return fusion->add_rmsnorm_forward(y, rstd, h, residual, weight, eps);
  }
  add_rmsnorm_forward(y, rstd, h, residual, weight, eps);
  return {};
}

ProducedOperands swiglu_forward_for(const Linear& consumer, const Tensor& out, const Tensor& h13) {
  if (ProducerFusion* fusion = consumer.producer_fusion(out)) {
    return fusion->swiglu_forward(out, h13);
  }
  swiglu_forward(out, h13);
  return {};
}

ProducedOperands swiglu_backward_for(const Linear& consumer, const Tensor& dh13, const Tensor& dout,
                                     const Tensor& h13) {
  if (ProducerFusion* fusion = consumer.producer_fusion(dh13)) {
    return fusion->swiglu_backward(dh13, dout, h13);
  }
  swiglu_backward(dh13, dout, h13);
  return {};
}

ProducedOperands rmsnorm_backward_add_for(const Linear& consumer, const Tensor& dx,
                                          const Tensor& dweight, const Tensor& dy, const Tensor& x,
                                          const Tensor& weight, const Tensor& rstd,
                                          const Tensor& dresidual) {
  if (ProducerFusion* fusion = consumer.producer_fusion(dx)) {
    return fusion->rmsnorm_backward_add(dx, dweight, dy, x, weight, rstd, dresidual);
  }
  rmsnorm_backward_add(dx, dweight, dy, x, weight, rstd, dresidual);
  return {};
}

}  // namespace titan::model
