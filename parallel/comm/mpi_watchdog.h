// The MPI backend's watchdog, the twin of the NCCL one (nccl_communicator.h): an
// operation on an MPI communicator, or a blocking MPI call of set-up, that has not completed
// parallelism.comm_timeout_s after it was posted ends the job with one line naming the
// operation, its mesh dims and the ranks that had not arrived, followed by the last operations
// of this rank and of every rank that answered (the flight recorder, collective_recorder.h).
//
// How it knows who had not arrived. Every process runs one watchdog thread (MPI is initialised
// with MPI_THREAD_MULTIPLE for it), talking on a duplicate of the world communicator of its own
// so that its messages never meet the program's. Every kPoll it answers the questions of other
// ranks' watchdogs and looks for an overdue operation in its recorder. When it finds one it
// asks every rank the operation waits for how far that rank has got on the same communicator,
// waits up to kAnswerWindow for the answers, and sorts the ranks (watchdog_report.h):
//   no answer           its watchdog thread is not running: the process is stopped (SIGSTOP,
//                       a debugger) or frozen
//   not arrived         fewer collectives posted there: waiting in another operation, or busy
//                       outside communication (a loop, a slow file system) since its last one
//   different collective its #n there is another operation: the ranks disagree on the order
//   arrived             it posted the same #n: the transport itself is stuck
// then prints and ends the job (MPI_Abort from the watchdog thread: the main thread is inside
// MPI_Wait). A rank whose main thread is stuck still answers: its watchdog is a thread apart.
//
// When several ranks time out together (all of them waiting for the one that stopped), a rank
// that learns from the answers that a lower rank has timed out too by the end of its window
// (overdue when it answered, or blocked then on an operation whose timeout has passed since)
// leaves the report to it for a few seconds, so the failure reads once.
#pragma once

#include <cstdint>
#include <string>

namespace titan::parallel {

// Collective over the world, right after MPI_Init (MpiRuntime does it): duplicates the world
// communicator for the watchdogs and, when there is more than one rank, starts this process's
// watchdog thread.
void start_mpi_watchdog();
// Stops the thread (idempotent); before MPI_Finalize.
void stop_mpi_watchdog();

// Operations posted from now on fail the job when not complete this long after their post
// (parallelism.comm_timeout_s; 600 until the config says otherwise).
void set_comm_timeout(double seconds);
double comm_timeout();

// A blocking MPI call on MPI_COMM_WORLD outside the Communicator interface (set-up's status
// agreements, communicator splits), watched from construction to destruction like a posted
// operation. A no-op before start_mpi_watchdog.
class WatchedMpiCall {
 public:
  WatchedMpiCall(std::string op, int64_t bytes = 0);
  ~WatchedMpiCall();
  WatchedMpiCall(const WatchedMpiCall&) = delete;
  WatchedMpiCall& operator=(const WatchedMpiCall&) = delete;

 private:
  uint64_t id_ = 0;
};

}  // namespace titan::parallel
