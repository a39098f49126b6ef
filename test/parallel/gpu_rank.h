// Start-up of a GPU test process that mpirun may have started beside others on one GPU.
#pragma once

namespace titan::testing {

// Call first in main, before MPI and NCCL start. Without a usable CUDA device it prints
// "SKIPPED: no CUDA device: <why>" (rank 0 only) and exits with 77, which ctest reports as a
// skip (mpirun passes the code on). Otherwise it makes device local_rank % devices current, and
// when this node has more ranks than devices it lets NCCL put several ranks on one GPU: NCCL
// refuses two ranks on one device of one host ("Duplicate GPU detected"), so each rank names
// itself a host of its own (NCCL_HOSTID) and they talk over loopback sockets (slow, correct).
// Variables the user set are left alone.
void prepare_gpu_rank();

}  // namespace titan::testing
