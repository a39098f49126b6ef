// Between this rank's piece of a parameter and the full tensor, for checkpoints that any mesh
// can write and any other mesh can read (resharding for free): the file holds full tensors
// under their names, each rank contributes or takes its own rows.
//
// `local` is laid out like the optimizer's parameter `p`: an FSDP shard (rank s of dp_shard
// holds rows [s·R, (s+1)·R) of its tensor-parallel slice, R = local.size(0)) or, without
// FSDP, the whole slice. The slice ↔ full mapping is model::for_each_local_run, the same one
// initialisation uses.
#pragma once

#include "model/parameter.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

// `local` may live on a GPU; the full tensors are always on the host.
//
// Collective over the (dp_shard, tp) submesh: every rank gets the full tensor [p.shape], on
// the host.
Tensor gather_full_tensor(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh);

// local = this rank's rows of `full` ([p.shape]); padding rows are zeroed. No communication.
void load_local_tensor(const Tensor& local, const model::Parameter& p, const Tensor& full,
                       const DeviceMesh& mesh);

}  // namespace titan::parallel
