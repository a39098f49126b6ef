#include "parallel/comm/mpi_failure.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/check.h"

namespace titan::parallel {

void mpi_check(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(detail::concat("MPI error in ", call, ": ", text, " at ", file, ":", line));
}

void abort_job(int code, const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  end_job(code);
}

void end_job(int code) {
  static std::atomic<bool> ending{false};
  if (ending.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace titan::parallel
