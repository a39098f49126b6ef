// This process's place in MPI_COMM_WORLD, for tests that start under mpirun.
#pragma once

#include <mpi.h>

namespace titan::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace titan::testing
