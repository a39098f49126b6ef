// The NCCL watchdog (docs/architecture.md#decision-12), beside the MPI one (mpi_watchdog.h): one
// thread per process watches every posted NCCL operation, from before NCCL is called (the first
// operation with a peer connects to it on the host, so a missing peer can hold the post itself)
// until its end event completes, and holds its tensors until then (so that the caching allocator
// cannot hand them out while NCCL still uses them). One that has not completed
// parallelism.comm_timeout_s after it was posted, a CUDA error on it, or an error that NCCL
// reports on a communicator, makes the watchdog print one line naming the operation, its mesh
// dims and the timeout or error, abort every NCCL communicator (ncclCommAbort, which frees a
// kernel stuck waiting for a peer) and end the job from its own thread (the main thread may be
// stuck in CUDA or MPI). nccl_communicator.cpp posts the operations; this file only watches.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda/stream.h"
#include "core/tensor.h"

namespace titan::parallel {

// One posted NCCL operation, from its post until the watchdog sees its end event complete.
// Until the end event is recorded (state Issued) the operation counts as running.
struct NcclInFlight {
  using Clock = std::chrono::steady_clock;
  enum State { Posting, Issued, Abandoned };  // Abandoned: NCCL refused it (an exception says so)

  NcclInFlight(std::string what_, double timeout_s_, std::vector<Tensor> keep_)
      : what(std::move(what_)), timeout_s(timeout_s_), keep(std::move(keep_)) {}

  const std::string what;  // "all_gather on dp_shard (bf16 × 4096 per rank)"
  const Clock::time_point posted = Clock::now();
  const double timeout_s;
  cuda::Event done;  // recorded on the communication stream after the operation
  std::atomic<State> state{Posting};
  // The tensors NCCL reads and writes; after watch() only the watchdog touches them.
  std::vector<Tensor> keep;
};

// The process's watchdog thread. Shared by every NCCL world of the process; the thread stops
// and is joined when the last one goes.
class NcclWatchdog {
 public:
  NcclWatchdog(int device, int world_rank);
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // The process's watchdog, started on first use for CUDA device `device`.
  static std::shared_ptr<NcclWatchdog> shared(int device, int world_rank);

  // A communicator whose asynchronous errors to watch, named for messages ("dp_shard").
  void add_comm(ncclComm_t comm, const std::string& name);
  // Before the communicator is destroyed. While the watchdog is aborting them all, it waits
  // for the job to end instead (the abort may be using it).
  void remove_comm(ncclComm_t comm);
  // From before the operation reaches NCCL until its end event completes.
  void watch(std::shared_ptr<NcclInFlight> op);

 private:
  void run();
  // Drops the completed operations (their tensors into `released`); returns what is wrong, or
  // "" when nothing is.
  std::string check(std::vector<std::vector<Tensor>>& released);
  // One line, then ncclCommAbort of every communicator (with a deadline: the job ends even if
  // an abort hangs), then the job ends.
  [[noreturn]] void fail(const std::string& problem);

  const int device_;
  const int world_rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool aborting_ = false;
  std::vector<std::pair<ncclComm_t, std::string>> comms_;
  std::vector<std::shared_ptr<NcclInFlight>> ops_;  // in post order
  std::thread thread_;
};

}  // namespace titan::parallel
