// The global gradient norm over a model sharded on every mesh dim, for clipping
// (torch.nn.utils.clip_grad_norm_ over DTensors, done by hand).
//
// Every gradient element must be counted exactly once across the job:
//   dp_shard      shards hold disjoint rows: their squares add up
//   tp            sliced parameters hold disjoint slices: they add up; tp-replicated ones (the
//                 sequence-parallel norms, already summed over tp) count on tp rank 0 only
//   dp_replicate  replicas hold identical gradients (already all-reduced): counted once, by
//                 summing over the (dp_shard, tp) submesh alone
#pragma once

#include <vector>

#include "model/parameter.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

// `params` are what this rank's optimizer steps (shards under FSDP); the same on every rank.
double global_grad_norm(const std::vector<model::Parameter*>& params, const DeviceMesh& mesh);

}  // namespace titan::parallel
