#include "parallel/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>
#include <vector>

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

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  TT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    // Only the main thread calls MPI; OpenBLAS and OpenMP threads never do.
    int provided = 0;
    TT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  }
  // Errors come back as codes (and become exceptions) instead of killing the job on the spot.
  TT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  TT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  MPI_Comm node = MPI_COMM_NULL;
  TT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  TT_MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  TT_MPI_CHECK(MPI_Comm_size(node, &local_size_));
  TT_MPI_CHECK(MPI_Comm_free(&node));
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

AgreedStatus agree_on_status(int status, const std::string& message) {
  int world_rank = 0;
  TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  AgreedStatus agreed;
  TT_MPI_CHECK(MPI_Allreduce(&status, &agreed.status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (agreed.status == 0) return agreed;
  int candidate = status == agreed.status ? world_rank : INT_MAX;
  TT_MPI_CHECK(MPI_Allreduce(&candidate, &agreed.rank, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  int length = world_rank == agreed.rank ? static_cast<int>(message.size()) : 0;
  TT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, agreed.rank, MPI_COMM_WORLD));
  std::vector<char> text(message.begin(), message.end());
  text.resize(length);
  TT_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, agreed.rank, MPI_COMM_WORLD));
  agreed.message.assign(text.begin(), text.end());
  return agreed;
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
