// The MPI Communicator: every collective, blocking and non-blocking, on the world and on
// submeshes of a (2, 2, 2) mesh, with values that depend on the rank and the element so that a
// wrong order, a wrong group or a missing reduction shows; and the argument errors.
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dims.h"

namespace titan::parallel {
namespace {

constexpr int64_t kN = 3;  // elements per rank

DeviceMesh mesh_2x2x2() {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  REQUIRE_MESSAGE(world == 8,
                  "the communicator tests build a (2, 2, 2) mesh and need exactly 8 "
                  "ranks (mpirun -np 8), got "
                      << world);
  return DeviceMesh::root(ParallelDims::resolve(2, 2, 2, world), rank);
}

// The groups each test runs on: the world (8), a strided group whose ranks are not
// consecutive in the world (dp_replicate×tp: 4), and a pair (tp: 2).
std::vector<DeviceMesh> meshes_under_test(const DeviceMesh& root) {
  return {root, root.slice({MeshDim::DpReplicate, MeshDim::Tp}), root[MeshDim::Tp]};
}

// Rank r's element i: distinct for every (r, i).
double value(int r, int64_t i) { return 100.0 * (r + 1) + static_cast<double>(i); }

// For Max, the largest value comes from a different rank for each element, and all are
// negative, so neither "last rank wins" nor a zero-initialised maximum passes.
double max_input(int r, int64_t i, int size) { return 10.0 * ((r + i) % size) - 1000.0 + i; }

template <class T>
Tensor rank_values(int r, int64_t n) {
  std::vector<T> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<T>(value(r, i));
  return Tensor::from_vector(values, {n});
}

template <class T>
std::vector<double> doubles(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<double>(t.data<T>()[i]));
  return out;
}

// Expected all_gather of rank_values over a group of `size`.
std::vector<double> gathered(int size) {
  std::vector<double> out;
  for (int q = 0; q < size; ++q) {
    for (int64_t i = 0; i < kN; ++i) out.push_back(value(q, i));
  }
  return out;
}

// Expected reduce_scatter of rank_values(·, size·kN) on rank r.
std::vector<double> scattered(ReduceOp op, int size, int r) {
  std::vector<double> out;
  for (int64_t i = 0; i < kN; ++i) {
    double sum = 0;
    for (int q = 0; q < size; ++q) sum += value(q, r * kN + i);
    out.push_back(op == ReduceOp::Sum ? sum : sum / size);
  }
  return out;
}

std::vector<double> reduced_sum(int size, double divisor = 1) {
  std::vector<double> out;
  for (int64_t i = 0; i < kN; ++i) {
    double sum = 0;
    for (int q = 0; q < size; ++q) sum += value(q, i);
    out.push_back(sum / divisor);
  }
  return out;
}

Tensor max_values(int r, int size) {
  std::vector<float> values;
  for (int64_t i = 0; i < kN; ++i) values.push_back(static_cast<float>(max_input(r, i, size)));
  return Tensor::from_vector(values, {kN});
}

std::vector<double> maxima(int size) {
  std::vector<double> out;
  for (int64_t i = 0; i < kN; ++i) out.push_back(10.0 * (size - 1) - 1000.0 + i);
  return out;
}

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("Communicator: blocking collectives on the world and on submeshes") {
    const DeviceMesh root = mesh_2x2x2();
    for (const DeviceMesh& mesh : meshes_under_test(root)) {
      Communicator& comm = mesh.comm();
      const int n = comm.size(), r = comm.rank();
      INFO("on ", comm.name(), ", rank ", r, " of ", n);

      Tensor out = Tensor::zeros({n * kN}, DType::F32);
      comm.all_gather(out, rank_values<float>(r, kN));
      CHECK(doubles<float>(out) == gathered(n));

      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        Tensor shard = Tensor::zeros({kN}, DType::F64);
        comm.reduce_scatter(shard, rank_values<double>(r, n * kN), op);
        CHECK(doubles<double>(shard) == scattered(op, n, r));
      }
      Tensor shard_max = Tensor::zeros({kN}, DType::F32);
      Tensor max_in = Tensor::empty({n * kN}, DType::F32);
      for (int64_t j = 0; j < n * kN; ++j) {
        max_in.data<float>()[j] = static_cast<float>(max_input(r, j, n));
      }
      comm.reduce_scatter(shard_max, max_in, ReduceOp::Max);
      for (int64_t i = 0; i < kN; ++i) {
        double expected = -1e9;
        for (int q = 0; q < n; ++q) expected = std::max(expected, max_input(q, r * kN + i, n));
        CHECK(shard_max.data<float>()[i] == static_cast<float>(expected));
      }

      Tensor sum = rank_values<float>(r, kN);
      comm.all_reduce(sum, ReduceOp::Sum);
      CHECK(doubles<float>(sum) == reduced_sum(n));
      Tensor avg = rank_values<double>(r, kN);
      comm.all_reduce(avg, ReduceOp::Avg);
      CHECK(doubles<double>(avg) == reduced_sum(n, n));
      Tensor max = max_values(r, n);
      comm.all_reduce(max, ReduceOp::Max);
      CHECK(doubles<float>(max) == maxima(n));

      const int from = n - 1;  // not rank 0, so "nothing moved" on rank 0 cannot pass
      Tensor broadcast = rank_values<double>(r, kN);
      comm.broadcast(broadcast, from);
      CHECK(doubles<double>(broadcast) == doubles<double>(rank_values<double>(from, kN)));

      comm.barrier();
    }
  }

  TEST_CASE("Communicator: send and recv around a ring keep post order per peer") {
    const DeviceMesh root = mesh_2x2x2();
    for (const DeviceMesh& mesh : meshes_under_test(root)) {
      Communicator& comm = mesh.comm();
      const int n = comm.size(), r = comm.rank();
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      INFO("on ", comm.name(), ", rank ", r, " of ", n);

      // Blocking: even ranks send first, odd ranks receive first (n is even here).
      Tensor got = Tensor::zeros({kN}, DType::F32);
      if (r % 2 == 0) {
        comm.send(rank_values<float>(r, kN), next);
        comm.recv(got, prev);
      } else {
        comm.recv(got, prev);
        comm.send(rank_values<float>(r, kN), next);
      }
      CHECK(doubles<float>(got) == doubles<float>(rank_values<float>(prev, kN)));

      // Non-blocking: two messages each way, waited on in an order unlike the post order.
      Tensor first = Tensor::zeros({kN}, DType::I64), second = Tensor::zeros({kN}, DType::I64);
      Work recv_first = comm.recv_async(first, prev);
      Work recv_second = comm.recv_async(second, prev);
      Work send_first = comm.send_async(rank_values<int64_t>(r, kN), next);
      Work send_second = comm.send_async(rank_values<int64_t>(r + 10, kN), next);
      recv_second.wait();
      send_second.wait();
      recv_first.wait();
      send_first.wait();
      CHECK(doubles<int64_t>(first) == doubles<int64_t>(rank_values<int64_t>(prev, kN)));
      CHECK(doubles<int64_t>(second) == doubles<int64_t>(rank_values<int64_t>(prev + 10, kN)));
    }
  }

  TEST_CASE("Communicator: several posted operations complete when waited on out of order") {
    const DeviceMesh root = mesh_2x2x2();
    Communicator& world = root.comm();
    Communicator& tp = root[MeshDim::Tp].comm();
    Communicator& dp = root[kDp].comm();
    const int n = world.size(), r = world.rank();

    // Posted in the same order on every rank, across three communicators.
    Tensor gather_out = Tensor::zeros({n * kN}, DType::F32);
    Work gather = world.all_gather_async(gather_out, rank_values<float>(r, kN));
    Tensor shard = Tensor::zeros({kN}, DType::F64);
    Work scatter = world.reduce_scatter_async(shard, rank_values<double>(r, n * kN), ReduceOp::Avg);
    Tensor tp_sum = rank_values<float>(tp.rank(), kN);
    Work tp_reduce = tp.all_reduce_async(tp_sum, ReduceOp::Sum);
    Tensor dp_avg = rank_values<double>(dp.rank(), kN);
    Work dp_reduce = dp.all_reduce_async(dp_avg, ReduceOp::Avg);
    Tensor broadcast = rank_values<float>(r, kN);
    Work bcast = world.broadcast_async(broadcast, 5);
    Tensor max = max_values(r, n);
    Work world_max = world.all_reduce_async(max, ReduceOp::Max);
    Work barrier = world.barrier_async();

    barrier.wait();
    world_max.wait();
    CHECK(doubles<float>(max) == maxima(n));
    while (!bcast.done()) {
    }
    CHECK(doubles<float>(broadcast) == doubles<float>(rank_values<float>(5, kN)));
    dp_reduce.wait();
    CHECK(doubles<double>(dp_avg) == reduced_sum(dp.size(), dp.size()));
    tp_reduce.wait();
    CHECK(doubles<float>(tp_sum) == reduced_sum(tp.size()));
    scatter.wait();
    CHECK(doubles<double>(shard) == scattered(ReduceOp::Avg, n, r));
    gather.wait();
    gather.wait();  // idempotent
    CHECK(gather.done());
    CHECK(doubles<float>(gather_out) == gathered(n));
  }

  TEST_CASE("Communicator: a Work keeps its tensors alive, and dropping it completes it") {
    const DeviceMesh root = mesh_2x2x2();
    Communicator& comm = root[MeshDim::DpShard].comm();
    const int n = comm.size(), r = comm.rank();

    // The caller's handles go away right after posting; the Work still has the buffers.
    Tensor out = Tensor::zeros({n * kN}, DType::F64);
    Work gather;
    {
      Tensor in = rank_values<double>(r, kN);
      gather = comm.all_gather_async(out, in);
    }
    gather.wait();
    CHECK(doubles<double>(out) == gathered(n));

    // An Avg dropped unwaited is still finished, division included.
    Tensor avg = rank_values<double>(r, kN);
    { Work dropped = comm.all_reduce_async(avg, ReduceOp::Avg); }
    CHECK(doubles<double>(avg) == reduced_sum(n, n));

    Work nothing;
    CHECK(nothing.done());
    nothing.wait();
  }

  TEST_CASE("Communicator: dtypes — bytes of any dtype move, only MPI's numbers reduce") {
    const DeviceMesh root = mesh_2x2x2();
    Communicator& comm = root.comm();
    const int n = comm.size(), r = comm.rank();

    // bf16 moves as bits.
    Tensor bits = Tensor::empty({2}, DType::BF16);
    bits.data<bf16_t>()[0].bits = static_cast<uint16_t>(0x3f80 + r);
    bits.data<bf16_t>()[1].bits = static_cast<uint16_t>(0xbf80 + r);
    Tensor all_bits = Tensor::zeros({n * 2}, DType::BF16);
    comm.all_gather(all_bits, bits);
    for (int q = 0; q < n; ++q) {
      CHECK(all_bits.data<bf16_t>()[2 * q].bits == 0x3f80 + q);
      CHECK(all_bits.data<bf16_t>()[2 * q + 1].bits == 0xbf80 + q);
    }
    Tensor bytes = Tensor::from_vector<uint8_t>({static_cast<uint8_t>(r), 7}, {2});
    comm.broadcast(bytes, 3);
    CHECK(bytes.data<uint8_t>()[0] == 3);

    // Integers sum and max exactly; their mean would truncate, so it is refused.
    Tensor count = Tensor::from_vector<int64_t>({r, int64_t{1} << 40}, {2});
    comm.all_reduce(count, ReduceOp::Sum);
    CHECK(count.data<int64_t>()[0] == n * (n - 1) / 2);
    CHECK(count.data<int64_t>()[1] == n * (int64_t{1} << 40));
    Tensor top = Tensor::from_vector<int32_t>({-r}, {1});
    comm.all_reduce(top, ReduceOp::Max);
    CHECK(top.data<int32_t>()[0] == 0);
    CHECK_THROWS_WITH_AS(comm.all_reduce(Tensor::zeros({2}, DType::I32), ReduceOp::Avg),
                         doctest::Contains("i32 with Avg"), Error);

    // bf16 reduces through f32 (small integers and halves are exact in bf16); fp8 cannot be
    // reduced by MPI: the error names the dtype and the op.
    Tensor halves =
        cast(Tensor::from_vector<float>({static_cast<float>(r + 1), 0.5f}, {2}), DType::BF16);
    comm.all_reduce(halves, ReduceOp::Sum);
    const Tensor summed = cast(halves, DType::F32);
    CHECK(summed.data<float>()[0] == static_cast<float>(n * (n + 1) / 2));
    CHECK(summed.data<float>()[1] == 0.5f * static_cast<float>(n));
    CHECK_THROWS_WITH_AS(comm.reduce_scatter(Tensor::zeros({1}, DType::E4M3),
                                             Tensor::zeros({n}, DType::E4M3), ReduceOp::Max),
                         doctest::Contains("e4m3 with Max"), Error);
    comm.barrier();  // everyone is still in step after the refusals
  }

  TEST_CASE("Communicator: wrong arguments are errors that say what was wrong") {
    const DeviceMesh root = mesh_2x2x2();
    Communicator& comm = root[MeshDim::Tp].comm();
    const int n = comm.size();
    CHECK_THROWS_WITH_AS(
        comm.all_gather(Tensor::zeros({n * kN + 1}, DType::F32), Tensor::zeros({kN}, DType::F32)),
        doctest::Contains("all_gather on tp: out f32[7] has 7 elements"), Error);
    CHECK_THROWS_WITH_AS(comm.reduce_scatter(Tensor::zeros({kN}, DType::F32),
                                             Tensor::zeros({kN}, DType::F32), ReduceOp::Sum),
                         doctest::Contains("reduce_scatter(Sum) on tp: in f32[3] has 3 elements"),
                         Error);
    CHECK_THROWS_WITH_AS(
        comm.all_gather(Tensor::zeros({n * kN}, DType::F64), Tensor::zeros({kN}, DType::F32)),
        doctest::Contains("same dtype"), Error);
    Tensor matrix = Tensor::zeros({4, 4}, DType::F32);
    CHECK_THROWS_WITH_AS(comm.all_reduce(matrix.narrow(1, 0, 2), ReduceOp::Sum),
                         doctest::Contains("strided view"), Error);
    CHECK_THROWS_WITH_AS(comm.all_gather(matrix.view({16}), matrix.view({16}).rows(0, 8)),
                         doctest::Contains("share memory"), Error);
    CHECK_THROWS_WITH_AS(comm.broadcast(matrix, n), doctest::Contains("root 2 is not a rank of tp"),
                         Error);
    CHECK_THROWS_WITH_AS(comm.send(matrix, -1), doctest::Contains("peer -1"), Error);
    CHECK_THROWS_WITH_AS(comm.all_reduce(Tensor(), ReduceOp::Sum), doctest::Contains("undefined"),
                         Error);
    comm.barrier();
  }
}

}  // namespace titan::parallel
