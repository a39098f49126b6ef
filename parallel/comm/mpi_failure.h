// How an MPI job reports an MPI error and ends itself: below both the communicators (comm/) and
// the process's MPI runtime (mpi_runtime.h), which each need them, so that neither includes the
// other (docs/architecture.md#decision-12).
#pragma once

#include <string>

namespace titan::parallel {

// TT_MPI_CHECK(call): throws titan::Error naming the call and MPI's error string.
void mpi_check(int code, const char* call, const char* file, int line);
#define TT_MPI_CHECK(call) ::titan::parallel::mpi_check((call), #call, __FILE__, __LINE__)

// Ends every rank of the job now with `code`, after printing `message` to stderr.
[[noreturn]] void abort_job(int code, const std::string& message);

// The same without a message (the caller printed it). Safe from any thread (MPI runs with
// MPI_THREAD_MULTIPLE), and from two at once: the first caller ends the job, a second one waits
// for that. The watchdogs call it from their threads: a job that must end cannot wait for a
// main thread stuck in a collective.
[[noreturn]] void end_job(int code);

}  // namespace titan::parallel
