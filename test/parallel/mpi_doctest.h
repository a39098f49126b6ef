// doctest on every rank of an mpirun job: the main of test_parallel and of the multi-rank GPU
// tests (mpi_doctest.cpp says how ranks report).
#pragma once

namespace titan::testing {

// Starts MPI, runs the test cases selected by argv on this rank, and returns the exit code the
// ranks agreed on: non-zero on every rank when any rank failed.
int run_doctest_on_every_rank(int argc, char** argv);

}  // namespace titan::testing
