#include "parallel/grad_norm.h"

#include <cmath>

#include "model/optim/grad_clip.h"

namespace titan::parallel {

double global_grad_norm(const std::vector<model::Parameter*>& params, const DeviceMesh& mesh) {
  const bool tp_rank_zero = mesh.coordinate(MeshDim::Tp) == 0;
  std::vector<model::Parameter*> counted;
  for (model::Parameter* p : params) {
    if (p->frozen) continue;  // no gradient
    if (!p->tp_replicated() || tp_rank_zero || mesh.degree(MeshDim::Tp) == 1) counted.push_back(p);
  }
  Tensor sum = Tensor::from_vector<double>({model::local_grad_sum_of_squares(counted)}, {1});
  // Each gradient element is held by one rank of pp × dp_shard × cp × tp (the stages hold
  // different layers, FSDP shards over dp_shard × cp, tp slices); dp_replicate holds copies.
  DeviceMesh owners = mesh.slice({MeshDim::Pp, kDpShardCp, MeshDim::Tp});
  if (owners.size() > 1) owners.comm().all_reduce(sum, ReduceOp::Sum);
  return std::sqrt(sum.data<double>()[0]);
}

}  // namespace titan::parallel
