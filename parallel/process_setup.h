// What titan_train and titan_generate do to their process before either reads its input, and
// how either ends when something fails (docs/architecture.md#decision-12): start MPI, give this
// rank's GEMMs its share of the node's cores, choose its GPU, run the set-up in phases that every
// rank agrees on, and after set-up end the job from the rank that failed. One home, so that the
// two executables cannot drift apart in how a job starts, refuses or fails.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/cuda/device_query.h"
#include "core/device.h"
#include "core/exit_code.h"
#include "parallel/mpi_runtime.h"

namespace titan::parallel {

// MPI for the process; when it cannot start, one line "<program>: error: cannot start MPI: …"
// on stderr and nullptr (main then returns ExitCode::Failure).
std::unique_ptr<MpiRuntime> start_mpi(int* argc, char*** argv, std::string_view program);

// Ranks on one node share its cores: each rank's GEMMs get its share, unless the user chose. A
// rank that mpirun/srun bound to cores gets exactly those; an unbound rank gets the node's cores
// divided by the ranks on it. OPENBLAS_NUM_THREADS, when set, must be a positive count (OpenBLAS
// reads "abc" as 0 and quietly uses every core): InputError otherwise. Returns the threads.
int configure_gemm_threads(int ranks_on_node);

// The GPU a rank runs on (info.index is its CUDA ordinal), and how many ranks of its node share
// it (the MPI backend allows it; the NCCL world refuses it when it is made).
struct GpuPlacement {
  CudaDeviceInfo info;
  int sharers = 1;
};

// The GPU of this rank for a CUDA `setting`: "cuda" means one GPU per rank, the node-local
// rank's among the devices CUDA_VISIBLE_DEVICES leaves visible; "cuda:N" pins every rank to
// device N. `key` is what the caller calls the setting in its messages ("training.device",
// "--device"). InputError when no GPU is usable or N is not one of them.
GpuPlacement choose_gpu(Device setting, int local_rank, int local_size, std::string_view key);

// Runs the set-up `phases` in order, and after each one every rank learns whether any failed
// (agree_on_status): then the lowest failing rank prints "<program>: error: <message>" and every
// rank returns the same exit status. After a phase that left `finished()` true (a print action:
// --help, --print-config) returns ExitCode::Ok. nullopt: every phase passed everywhere.
std::optional<int> run_setup_phases(std::span<const std::function<void()>> phases,
                                    std::string_view program, int world_rank,
                                    const std::function<bool()>& finished);

// A failure after set-up: a lone rank prints "<program>: error: <message>" and returns the code
// (main then finalizes MPI, so a launcher reports a plain non-zero exit); one of many aborts the
// whole job with the message, so no rank is left waiting in a collective.
int fail_after_setup(ExitCode code, std::string_view message, std::string_view program,
                     int world_rank, int world_size);

}  // namespace titan::parallel
