// The parallel WholeMatrices (model/optim/whole_matrices.h): Muon's route from the pieces of a
// weight matrix to the whole and back.
//
// The ranks that hold distinct pieces of a stage's parameters are those of dp_shard × cp × tp:
// FSDP's row shards (over dp_shard × cp, owned_rows.h) of each tensor-parallel slice. Within
// that group the matrices go round robin: matrix i is orthogonalised by the group's rank
// i mod size. In each round of `size` matrices every rank sends its pieces to their owners and
// receives its own matrix's pieces (point to point, posted together), assembles the whole,
// transforms it, and sends each rank its piece of the result. A round holds at most one whole
// matrix per rank, so the memory this takes is one matrix, not the model. Replicas across
// dp_replicate (HSDP, DDP) each do the same work on the same values and get the same result.
#pragma once

#include "model/optim/whole_matrices.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

class WholeMatrixExchange final : public model::WholeMatrices {
 public:
  explicit WholeMatrixExchange(const DeviceMesh& mesh);

  void transform(const std::vector<const model::Parameter*>& params,
                 const std::vector<Tensor>& pieces,
                 const model::WholeMatrixTransform& transform) override;

  // The group's size: how many ranks share the matrices' work.
  int64_t group_size() const { return group_.size(); }

 private:
  DeviceMesh group_;    // dp_shard × cp × tp
  int64_t shards_ = 1;  // FSDP's shards of a slice: dp_shard × cp, or 1 when unsharded
  int64_t tp_ = 1;
};

}  // namespace titan::parallel
