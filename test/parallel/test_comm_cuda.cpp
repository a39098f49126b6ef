// Communicators on CUDA tensors, run by mpirun on any number of ranks (ctest runs 1 and 2, all
// on one GPU): every collective gives on CUDA tensors exactly what the same communicator gives
// on CPU tensors, which test_communicator checks against formulas on 8 ranks.
//
//   "mpi backend: …"   the MPI backend, CUDA tensors staged through the host
//   "nccl backend: …"  the NCCL backend: CUDA tensors through NCCL on the communication
//                      stream, CPU tensors through MPI; its argument errors
//
// Values are small integers, exact in bf16, and their sums and halves too, so the two devices
// must agree bit for bit whatever order a library adds in. CUDA outputs start poisoned_buffer.
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dims.h"

namespace titan::parallel {
namespace {

constexpr int64_t kCudaN = 5;  // elements per rank

Device gpu() { return Device::cuda(cuda::current_device()); }

// A (1, world, 1) mesh: every rank on dp_shard.
DeviceMesh shard_mesh(CommBackend backend) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return DeviceMesh::root(ParallelDims::resolve(1, world, 1, world), rank,
                          CommOptions{backend, 60});
}

// The world, dp_shard (the same ranks through another communicator) and tp (this rank alone).
std::vector<DeviceMesh> cuda_meshes_under_test(const DeviceMesh& root) {
  return {root, root[MeshDim::DpShard], root[MeshDim::Tp]};
}

// Rank r's element i: distinct for every (r, i), exact in bf16 (and so are sums and halves).
Tensor cuda_rank_values(int r, int64_t n, DType dtype) {
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(static_cast<float>(8 * (r + 1) + i));
  const Tensor f32 = Tensor::from_vector(values, {n});
  return dtype == DType::F32 ? f32 : cast(f32, dtype);
}

// For Max: the largest value comes from a different rank for each element, all negative.
Tensor cuda_max_values(int r, int64_t n, int size) {
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(static_cast<float>(4 * ((r + i) % size) - 64));
  return Tensor::from_vector(values, {n});
}

// A CUDA tensor of `shape` holding -7 everywhere, so that an output never written shows.
Tensor poisoned_buffer(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, gpu());
  t.fill_(-7);
  return t;
}

Tensor on_gpu(const Tensor& t) { return t.to(gpu()); }

// The values, as f32 on the host: bf16 and f32 convert exactly.
std::vector<float> floats(const Tensor& t) {
  Tensor host = t.to(Device::cpu());
  if (host.dtype() != DType::F32) host = cast(host, DType::F32);
  return std::vector<float>(host.data<float>(), host.data<float>() + host.numel());
}

// Every collective of `comm` on CUDA tensors against the same call on CPU tensors.
void check_collectives(Communicator& comm, const std::vector<DType>& reduce_dtypes) {
  const int n = comm.size(), r = comm.rank();
  INFO("on ", comm.name(), ", rank ", r, " of ", n);

  for (DType dtype : {DType::F32, DType::BF16}) {
    INFO("all_gather ", dtype_name(dtype));
    const Tensor in = cuda_rank_values(r, kCudaN, dtype);
    const Tensor cpu_out = Tensor::zeros({n * kCudaN}, dtype);
    comm.all_gather(cpu_out, in);
    const Tensor gpu_out = poisoned_buffer({n * kCudaN}, dtype);
    comm.all_gather(gpu_out, on_gpu(in));
    CHECK(floats(gpu_out) == floats(cpu_out));
  }

  for (DType dtype : reduce_dtypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      INFO("reduce_scatter ", dtype_name(dtype), " op ", static_cast<int>(op));
      const Tensor in = cuda_rank_values(r, n * kCudaN, DType::F32);
      const Tensor cpu_out = Tensor::zeros({kCudaN}, DType::F32);
      comm.reduce_scatter(cpu_out, in, op);  // the reference, in f32 (MPI adds no bf16)
      const Tensor gpu_out = poisoned_buffer({kCudaN}, dtype);
      comm.reduce_scatter(gpu_out, on_gpu(cast(in, dtype)), op);
      CHECK(floats(gpu_out) == floats(cpu_out));
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      INFO("all_reduce ", dtype_name(dtype), " op ", static_cast<int>(op));
      const Tensor in = op == ReduceOp::Max ? cuda_max_values(r, kCudaN, n)
                                            : cuda_rank_values(r, kCudaN, DType::F32);
      const Tensor cpu_t = in.clone();
      comm.all_reduce(cpu_t, op);
      const Tensor gpu_t = on_gpu(cast(in, dtype));
      comm.all_reduce(gpu_t, op);
      CHECK(floats(gpu_t) == floats(cpu_t));
    }
  }

  for (DType dtype : {DType::F32, DType::BF16}) {
    INFO("broadcast ", dtype_name(dtype));
    const int from = n - 1;  // not rank 0, so "nothing moved" on rank 0 cannot pass
    const Tensor cpu_t = cuda_rank_values(r, kCudaN, dtype);
    comm.broadcast(cpu_t, from);
    const Tensor gpu_t =
        r == from ? on_gpu(cuda_rank_values(r, kCudaN, dtype)) : poisoned_buffer({kCudaN}, dtype);
    comm.broadcast(gpu_t, from);
    CHECK(floats(gpu_t) == floats(cpu_t));
  }

  // Point to point in an order both backends can run: even ranks send first, odd ranks
  // receive first (NCCL's send blocks the stream until the peer receives).
  if (n >= 2 && n % 2 == 0) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (DType dtype : {DType::F32, DType::BF16}) {
      INFO("send/recv ", dtype_name(dtype));
      const Tensor cpu_got = Tensor::zeros({kCudaN}, dtype);
      const Tensor gpu_got = poisoned_buffer({kCudaN}, dtype);
      using Output = std::pair<Tensor, Device>;
      for (const auto& [got, device] :
           std::vector<Output>{{cpu_got, Device::cpu()}, {gpu_got, gpu()}}) {
        const Tensor mine = cuda_rank_values(r, kCudaN, dtype).to(device);
        if (r % 2 == 0) {
          comm.send(mine, next);
          comm.recv(got, prev);
        } else {
          comm.recv(got, prev);
          comm.send(mine, next);
        }
      }
      CHECK(floats(gpu_got) == floats(cpu_got));
      CHECK(floats(gpu_got) == floats(cuda_rank_values(prev, kCudaN, dtype)));
    }
  }

  comm.barrier();
}

// Posted together, waited on in reverse order, the caller's handles dropped right after the
// post: the Work keeps the tensors alive and each result still arrives.
void check_posted_together(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  INFO("on ", comm.name(), ", rank ", r, " of ", n);
  Tensor gathered = poisoned_buffer({n * kCudaN}, DType::F32);
  Work gather = comm.all_gather_async(gathered, on_gpu(cuda_rank_values(r, kCudaN, DType::F32)));
  Tensor summed = on_gpu(cuda_rank_values(r, kCudaN, DType::F32));
  Work reduce = comm.all_reduce_async(summed, ReduceOp::Sum);
  Tensor shard = poisoned_buffer({kCudaN}, DType::F32);
  Work scatter = comm.reduce_scatter_async(
      shard, on_gpu(cuda_rank_values(r, n * kCudaN, DType::F32)), ReduceOp::Avg);
  scatter.wait();
  reduce.wait();
  gather.wait();
  gather.wait();  // idempotent

  const Tensor cpu_gathered = Tensor::zeros({n * kCudaN}, DType::F32);
  comm.all_gather(cpu_gathered, cuda_rank_values(r, kCudaN, DType::F32));
  const Tensor cpu_summed = cuda_rank_values(r, kCudaN, DType::F32);
  comm.all_reduce(cpu_summed, ReduceOp::Sum);
  const Tensor cpu_shard = Tensor::zeros({kCudaN}, DType::F32);
  comm.reduce_scatter(cpu_shard, cuda_rank_values(r, n * kCudaN, DType::F32), ReduceOp::Avg);
  CHECK(floats(gathered) == floats(cpu_gathered));
  CHECK(floats(summed) == floats(cpu_summed));
  CHECK(floats(shard) == floats(cpu_shard));
}

// The message of the Error `f` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("mpi backend: CUDA tensors staged through the host give what CPU tensors give") {
    const DeviceMesh root = shard_mesh(CommBackend::Mpi);
    for (const DeviceMesh& mesh : cuda_meshes_under_test(root)) {
      check_collectives(mesh.comm(), {DType::F32});  // MPI reduces no bf16
      check_posted_together(mesh.comm());
    }
  }

  TEST_CASE("nccl backend: CUDA tensors through NCCL give what CPU tensors give through MPI") {
    const DeviceMesh root = shard_mesh(CommBackend::Nccl);
    CHECK(root.backend() == CommBackend::Nccl);
    for (const DeviceMesh& mesh : cuda_meshes_under_test(root)) {
      check_collectives(mesh.comm(), {DType::F32, DType::BF16});
      check_posted_together(mesh.comm());
    }
  }

  TEST_CASE("nccl backend: CPU tensors go to MPI and done() turns true and misuse is refused") {
    const DeviceMesh root = shard_mesh(CommBackend::Nccl);
    Communicator& comm = root[MeshDim::DpShard].comm();
    const int n = comm.size(), r = comm.rank();

    // What MPI reduces and NCCL's CUDA path is never given: f64 and i64 host tensors.
    Tensor loss = Tensor::from_vector(std::vector<double>{1.5 * (r + 1)}, {1});
    comm.all_reduce(loss, ReduceOp::Sum);
    CHECK(loss.data<double>()[0] == 1.5 * n * (n + 1) / 2);
    Tensor count = Tensor::from_vector(std::vector<int64_t>{r + 1}, {1});
    comm.all_reduce(count, ReduceOp::Max);
    CHECK(count.data<int64_t>()[0] == n);

    // done() is a query of the end event; it turns true without anyone waiting on the host.
    Tensor t = on_gpu(cuda_rank_values(r, 1 << 16, DType::F32));
    Work work = comm.all_reduce_async(t, ReduceOp::Sum);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!work.done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(work.done());

    const std::string mixed = error_of([&] {
      comm.all_gather(Tensor::zeros({n * kCudaN}, DType::F32, gpu()),
                      cuda_rank_values(r, kCudaN, DType::F32));
    });
    // The group's name follows the mesh: "world" on 2 ranks, "self" on one.
    CHECK(mixed.find("all_gather on " + comm.name() + ": in f32[5] is on cpu") !=
          std::string::npos);
    CHECK(mixed.find("hands CPU tensors to MPI") != std::string::npos);

    const std::string to_self =
        error_of([&] { comm.send(on_gpu(cuda_rank_values(r, kCudaN, DType::F32)), r); });
    CHECK(to_self.find("NCCL cannot send to or receive from the rank itself") != std::string::npos);

    const std::string fp8_sum = error_of(
        [&] { comm.all_reduce(Tensor::zeros({kCudaN}, DType::E4M3, gpu()), ReduceOp::Sum); });
    CHECK(fp8_sum.find("does not reduce e4m3 with Sum") != std::string::npos);

    const std::string int_avg = error_of(
        [&] { comm.all_reduce(Tensor::zeros({kCudaN}, DType::I32, gpu()), ReduceOp::Avg); });
    CHECK(int_avg.find("does not reduce i32 with Avg") != std::string::npos);
  }
}

}  // namespace titan::parallel
