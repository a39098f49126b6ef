#include "model/optim/grad_clip.h"

#include "model/ops/tensor_math.h"

namespace titan::model {

double local_grad_sum_of_squares(const std::vector<Parameter*>& params) {
  double sum = 0;
  for (const Parameter* p : params) sum += sum_of_squares(p->grad);
  return sum;
}

void clip_grads_to_norm(const std::vector<Parameter*>& params, double total_norm, double max_norm) {
  if (max_norm <= 0) return;
  double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1.0) return;
  for (const Parameter* p : params) scale_inplace(p->grad, coef);
}

}  // namespace titan::model
