// MPI for the whole process, and what the job does when something fails
// (docs/architecture.md#decision-12).
//
// MPI is initialised first thing in main, also for a lone rank started without mpirun (Open MPI
// then runs it as a singleton), so every code path sees the same world communicator.
//
// Failure is collective: during set-up, every rank reports whether it failed and the lowest
// failing rank prints its one-line message (rank_agreement.h), so a bad config gives one line
// and exit code 2, not one line per rank; after set-up, a rank that fails aborts the whole job
// (MPI_Abort) with its message, so no rank is left waiting in a collective. A rank that stops or
// hangs without failing is the MPI watchdog's (comm/mpi_watchdog.h), which MpiRuntime starts and
// stops; its destructor also ends a process whose MPI_Finalize outlasts parallelism.comm_timeout_s.
#pragma once

#include <string>

#include "parallel/comm/mpi_failure.h"  // defines: TT_MPI_CHECK, abort_job, end_job

namespace titan::parallel {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node
  int local_size() const { return local_size_; }

 private:
  void isolate_singleton();  // a lone process's own Open MPI session folder (mpi_runtime.cpp)

  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string private_session_folder_;  // removed after MPI_Finalize; empty: none made
};

}  // namespace titan::parallel
