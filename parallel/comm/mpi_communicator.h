// The MPI backend of Communicator: non-blocking MPI collectives (MPI-3) on CPU tensors, and on
// CUDA tensors through host copies (the .cpp says how; slow, but any number of ranks can share
// one GPU, which NCCL refuses — the multi-rank GPU tests rely on it).
//
// Only a factory is declared here, so that code holding a Communicator never sees <mpi.h>; the
// class, MpiCommunicator, lives in the .cpp. Each communicator owns its MPI_Comm (freed when the
// last handle goes, unless MPI is already finalized) and returns MPI errors as codes, which
// become titan::Error.
//
// What MPI can reduce: f32, f64, i32, i64 (Sum, Max; Avg only for f32 and f64, since an integer
// mean would truncate), and bf16 through f32 host copies (rounded once, after the sum). Gathers,
// broadcasts, sends and receives move any dtype as raw elements. Counts are MPI ints, so one call
// moves at most INT_MAX elements per rank.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/communicator.h"

namespace titan::parallel {

// MPI_Comm_split of MPI_COMM_WORLD: the ranks passing the same `color` form one group, ordered
// by `key`; a rank passing kNoGroup joins none and gets null back (the pipeline's peer channels,
// where a split pairs some ranks only). Collective over the world: every rank calls it, in the
// same order.
inline constexpr int kNoGroup = -1;
std::shared_ptr<Communicator> split_world_communicator(int color, int key, std::string name);

}  // namespace titan::parallel
