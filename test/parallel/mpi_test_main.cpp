// doctest main for tests that run on every rank of an mpirun job (test_parallel).
#include "mpi_doctest.h"

int main(int argc, char** argv) { return titan::testing::run_doctest_on_every_rank(argc, argv); }
