#include "model/optim/grad_clip.h"

#include "model/ops/tensor_math.h"

namespace titan::model {

double local_grad_sum_of_squares(const std::vector<Parameter*>& params) {
  // One batch: on CUDA one wait for every gradient's sum, not one a parameter.
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Parameter* p : params) {
    if (p->trained()) grads.push_back(p->grad);
  }
  double sum = 0;
  for (double s : sums_of_squares(grads)) sum += s;
  return sum;
}

void clip_grads_to_norm(const std::vector<Parameter*>& params, double total_norm, double max_norm) {
  if (max_norm <= 0) return;
  double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1.0) return;
  for (const Parameter* p : params) {
    if (p->trained()) scale_inplace(p->grad, coef);
  }
}

}  // namespace titan::model
