#include "parallel/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "parallel/comm/mpi_watchdog.h"

namespace titan::parallel {

namespace {

bool started_without_launcher() {
  // mpirun's ranks (Open MPI), and srun's under PMIx or PMI-2.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return false;
  }
  return true;
}

}  // namespace

// Started without a launcher, Open MPI 4's MPI_Init forks an orted daemon for the one process,
// so that it could spawn processes later, which nothing here does: isolated, a lone rank starts
// in half the time (0.5 s against 1.0 s for --print-config on the 2-core VM under load). But
// every isolated singleton takes the same job family, so all of them share one session folder
// (<tmp>/ompi.<host>.<uid>/jf.0), and one that finishes removes it under another that is
// starting ("ORTE_ERROR_LOG: Error in file ../../../orte/util/session_dir.c", MPI_Init fails;
// open-mpi/ompi#3818): a test suite starts many at once. So each gets a session folder of its
// own, removed after MPI_Finalize. Where it cannot be made, or the user chose either setting,
// Open MPI's default stands.
void MpiRuntime::isolate_singleton() {
  if (std::getenv("OMPI_MCA_ess_singleton_isolated") != nullptr ||
      std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr) {
    return;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string folder =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/titan-mpi-XXXXXX";
  if (mkdtemp(folder.data()) == nullptr) return;
  private_session_folder_ = folder;
  setenv("OMPI_MCA_orte_tmpdir_base", folder.c_str(), /*overwrite=*/1);
  setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/1);
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  TT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    // The training thread makes the program's MPI calls; the MPI watchdog's thread
    // (comm/mpi_watchdog.h) asks the other ranks' watchdogs questions while the training thread
    // sits in MPI_Wait, which needs MPI_THREAD_MULTIPLE. An MPI that offers less still runs: its
    // watchdog times operations out without asking (it says so when it fires).
    //
    if (started_without_launcher()) isolate_singleton();
    int provided = 0;
    TT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  }
  // Errors come back as codes (and become exceptions) instead of killing the job on the spot.
  TT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  TT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  start_mpi_watchdog();
  MPI_Comm node = MPI_COMM_NULL;
  WatchedMpiCall watched("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  TT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  TT_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  TT_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  TT_MPI_CHECK(MPI_Comm_free(&node));
}

namespace {

// MPI_Finalize waits for every rank: one stopped (SIGSTOP) or hung at its exit would hold the
// others there forever, where the watchdog no longer runs. This guard ends the process when
// finalizing takes longer than the communication timeout; mpirun/srun then end the job.
class FinalizeGuard {
 public:
  explicit FinalizeGuard(double timeout_s, int world_rank)
      : thread_([this, timeout_s, world_rank] {
          std::unique_lock lock(mutex_);
          if (done_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                             [this] { return finished_; })) {
            return;
          }
          std::fprintf(stderr,
                       "titan_train: rank %d: error: MPI_Finalize has not returned after %g s "
                       "(parallelism.comm_timeout_s): another rank is stopped or hung at its exit; "
                       "ending this process\n",
                       world_rank, timeout_s);
          std::fflush(stderr);
          std::_Exit(1);
        }) {}
  ~FinalizeGuard() {
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    done_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace

MpiRuntime::~MpiRuntime() {
  stop_mpi_watchdog();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (world_size_ == 1) {
    MPI_Finalize();
    if (!private_session_folder_.empty()) {
      std::error_code ignored;  // what Open MPI left in it; nothing else writes there
      std::filesystem::remove_all(private_session_folder_, ignored);
    }
    return;
  }
  FinalizeGuard guard(comm_timeout(), world_rank_);
  MPI_Finalize();
}

}  // namespace titan::parallel
