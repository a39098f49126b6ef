// Gradient-norm clipping, split so that the norm can be global over a sharded model:
// each rank sums the squares of the gradients it holds, the sums are added across ranks
// (parallel/ does that over every mesh dim that shards gradients), and every rank scales its
// gradients by the same factor.
#pragma once

#include <vector>

#include "model/parameter.h"

namespace titan::model {

// Σ g² over the gradients this rank holds.
double local_grad_sum_of_squares(const std::vector<Parameter*>& params);

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_. A max_norm <= 0 disables clipping.
void clip_grads_to_norm(const std::vector<Parameter*>& params, double total_norm, double max_norm);

}  // namespace titan::model
