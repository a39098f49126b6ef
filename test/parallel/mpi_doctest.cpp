// doctest for tests that run on every rank of an mpirun job.
//
// Every rank runs the same test cases in the same order (their collectives must match). Rank 0
// reports as usual; the other ranks' reports are captured and printed, with the rank, only when
// that rank failed, so a failure on rank 5 is visible without eight copies of every summary.
// The exit code is agreed: every rank returns non-zero when any rank failed, so mpirun and
// ctest see the failure whichever rank had it.
#define DOCTEST_CONFIG_IMPLEMENT
#include "mpi_doctest.h"

#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

#include "parallel/mpi_runtime.h"

namespace titan::testing {

int run_doctest_on_every_rank(int argc, char** argv) {
  try {
    titan::parallel::MpiRuntime mpi(&argc, &argv);
    doctest::Context context(argc, argv);
    std::ostringstream captured;
    if (mpi.world_rank() != 0) context.setCout(&captured);
    const int result = context.run();
    if (context.shouldExit()) return result;  // --help, --list-test-cases, …

    int failed = result != 0 ? 1 : 0;
    if (failed && mpi.world_rank() != 0) {
      std::fprintf(stderr, "==== rank %d of %d failed ====\n%s", mpi.world_rank(), mpi.world_size(),
                   captured.str().c_str());
      std::fflush(stderr);
    }
    int any_failed = 0;
    TT_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (any_failed && !failed && mpi.world_rank() == 0) {
      std::fprintf(stderr, "rank 0 passed, but another rank failed (its report is on stderr)\n");
    }
    return any_failed;
  } catch (const std::exception& e) {
    // Outside a test case (MPI start-up): end the whole job rather than leave ranks waiting.
    titan::parallel::abort_job(1, std::string("mpi test main: ") + e.what());
  }
}

}  // namespace titan::testing
