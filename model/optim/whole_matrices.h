// How Muon reaches the whole of a matrix that the ranks hold in pieces.
//
// Newton–Schulz orthogonalises a weight's update as one matrix, but under FSDP a rank holds a
// row shard of it and under tensor parallelism a row or column slice. A WholeMatrices moves
// each matrix's pieces to one rank of the group that holds it, lets that rank transform the
// whole, and returns every rank its piece of the result. The one-rank case is here; the
// parallel one (parallel/whole_matrix_exchange.h) spreads the matrices over the group's ranks
// round robin, so each rank orthogonalises its share. model/ never includes parallel/.
#pragma once

#include <functional>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "model/parameter.h"

namespace titan::model {

// transform(param, whole): replaces whole ([rows, cols], the parameter's full shape, its dtype
// and device) by the result, in place.
using WholeMatrixTransform = std::function<void(const Parameter& param, const Tensor& whole)>;

class WholeMatrices {
 public:
  virtual ~WholeMatrices() = default;
  // pieces[i]: this rank's piece of params[i]'s matrix, the local shape of what the optimizer
  // steps for it. Every rank of the group calls it with the same parameters in the same order;
  // transform runs once for each matrix, on one rank; pieces[i] then holds this rank's piece of
  // the result.
  virtual void transform(const std::vector<const Parameter*>& params,
                         const std::vector<Tensor>& pieces,
                         const WholeMatrixTransform& transform) = 0;
};

// One rank holds every matrix whole.
class LocalMatrices final : public WholeMatrices {
 public:
  void transform(const std::vector<const Parameter*>& params, const std::vector<Tensor>& pieces,
                 const WholeMatrixTransform& transform) override {
    for (size_t i = 0; i < params.size(); ++i) {
      TT_CHECK(pieces[i].shape() == params[i]->shape, "LocalMatrices: ", params[i]->name,
               " is held as ", pieces[i].shape(), ", not whole ", params[i]->shape,
               "; a sharded run needs the parallel exchange");
      transform(*params[i], pieces[i]);
    }
  }
};

}  // namespace titan::model
