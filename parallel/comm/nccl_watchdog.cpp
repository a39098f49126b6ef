#include "parallel/comm/nccl_watchdog.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "core/check.h"
#include "parallel/comm/mpi_failure.h"

namespace titan::parallel {
namespace {

using Clock = NcclInFlight::Clock;

// How often the watchdog looks: often while operations are in flight, because it is also what
// returns their tensors to the allocator; seldom otherwise (asynchronous errors only).
constexpr auto kBusyPoll = std::chrono::milliseconds(5);
constexpr auto kIdlePoll = std::chrono::milliseconds(500);
// How long the watchdog lets ncclCommAbort take before it ends the job without it.
constexpr auto kAbortGrace = std::chrono::seconds(10);

}  // namespace

NcclWatchdog::NcclWatchdog(int device, int world_rank) : device_(device), world_rank_(world_rank) {
  thread_ = std::thread([this] { run(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<NcclWatchdog> NcclWatchdog::shared(int device, int world_rank) {
  static std::mutex mutex;
  static std::weak_ptr<NcclWatchdog> current;
  std::lock_guard lock(mutex);
  std::shared_ptr<NcclWatchdog> watchdog = current.lock();
  if (!watchdog) {
    watchdog = std::make_shared<NcclWatchdog>(device, world_rank);
    current = watchdog;
  }
  return watchdog;
}

void NcclWatchdog::add_comm(ncclComm_t comm, const std::string& name) {
  std::lock_guard lock(mutex_);
  comms_.emplace_back(comm, name);
}

void NcclWatchdog::remove_comm(ncclComm_t comm) {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [this] { return !aborting_; });
  std::erase_if(comms_, [comm](const auto& entry) { return entry.first == comm; });
}

void NcclWatchdog::watch(std::shared_ptr<NcclInFlight> op) {
  {
    std::lock_guard lock(mutex_);
    ops_.push_back(std::move(op));
  }
  wake_.notify_all();
}

void NcclWatchdog::run() {
  // Event queries need no particular device, but the thread's runtime state should match
  // the communicators'.
  cudaSetDevice(device_);
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, ops_.empty() ? kIdlePoll : kBusyPoll);
    if (stop_) break;
    std::vector<std::vector<Tensor>> released;
    const std::string problem = check(released);
    if (!problem.empty()) {
      aborting_ = true;
      lock.unlock();
      fail(problem);
    }
    // The tensors go back to their allocators outside the lock.
    lock.unlock();
    released.clear();
    lock.lock();
  }
}

std::string NcclWatchdog::check(std::vector<std::vector<Tensor>>& released) {
  const Clock::time_point now = Clock::now();
  for (auto it = ops_.begin(); it != ops_.end();) {
    const NcclInFlight& op = **it;
    const NcclInFlight::State posting = op.state.load(std::memory_order_acquire);
    const cudaError_t state =
        posting == NcclInFlight::Issued ? cudaEventQuery(op.done.get()) : cudaErrorNotReady;
    if (state == cudaSuccess || posting == NcclInFlight::Abandoned) {
      released.push_back(std::move((*it)->keep));
      it = ops_.erase(it);
      continue;
    }
    if (state != cudaErrorNotReady) {
      return detail::concat(op.what, " failed on the GPU: ", cudaGetErrorName(state), ": ",
                            cudaGetErrorString(state));
    }
    (void)cudaGetLastError();  // cudaErrorNotReady is a state, not an error to report later
    const double age = std::chrono::duration<double>(now - op.posted).count();
    if (age > op.timeout_s) {
      return detail::concat(op.what, " has not completed ", static_cast<int64_t>(age),
                            " s after it was posted (parallelism.comm_timeout_s: ", op.timeout_s,
                            "): a rank of the group never posted its side, or is stuck");
    }
    ++it;
  }
  for (const auto& [comm, name] : comms_) {
    ncclResult_t error = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &error) != ncclSuccess) continue;
    if (error != ncclSuccess && error != ncclInProgress) {
      return detail::concat("NCCL reports an error on the ", name,
                            " communicator: ", ncclGetErrorString(error), " (",
                            ncclGetLastError(comm), ")");
    }
  }
  return "";
}

void NcclWatchdog::fail(const std::string& problem) {
  const std::string message = detail::concat(
      "titan_train: rank ", world_rank_, ": error: NCCL watchdog: ", problem, "; aborting the job");
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::thread([] {
    std::this_thread::sleep_for(kAbortGrace);
    std::fprintf(stderr, "NCCL watchdog: ncclCommAbort did not return within %lld s\n",
                 static_cast<long long>(kAbortGrace.count()));
    end_job(1);
  }).detach();
  std::vector<ncclComm_t> comms;
  {
    std::lock_guard lock(mutex_);
    for (const auto& entry : comms_) comms.push_back(entry.first);
  }
  for (ncclComm_t comm : comms) ncclCommAbort(comm);
  end_job(1);
}

}  // namespace titan::parallel
