// The sequence-parallel linear styles against one rank's linear, on the tp groups of a
// (2, 2, 2) mesh (and a tp-4 group of (1, 2, 4)): each rank's forward output, input gradient and
// weight-gradient slice must equal the matching block of the unsharded computation.
//
//   column-parallel  x rows [T/tp] in, w rows [out/tp]   -> y [T, out/tp]   = y[:, slice]
//                    dy [T, out/tp]                      -> dx [T/tp, in]   = dx[rows, :]
//   row-parallel     x cols [T, in/tp], w cols [out, in/tp] -> y [T/tp, out] = y[rows, :]
//                    dy [T/tp, out]                      -> dx [T, in/tp]   = dx[:, slice]
#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/linear.h"
#include "parallel/device_mesh.h"
#include "parallel/tensor_parallel.h"
#include "support/mpi_world.h"

namespace titan::parallel {
namespace {

using testing::world_rank;

constexpr int64_t kT = 8, kIn = 12, kOut = 16;

// Same values on every rank: a pure function of the name.
Tensor random_matrix(const char* name, int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols}, DType::F64);
  CounterRng rng(3, name);
  for (int64_t i = 0; i < rows * cols; ++i)
    t.data<double>()[i] = rng.normal(static_cast<uint64_t>(i));
  return t;
}

Tensor tp_columns(const Tensor& t, int64_t begin, int64_t count) {
  Tensor out = Tensor::empty({t.size(0), count}, t.dtype());
  out.copy_from(t.narrow(1, begin, count));
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs(a.data<double>()[i] - b.data<double>()[i]));
  return worst;
}

struct TpReference {
  Tensor x, w, y, dy, dx, dw;
};

TpReference reference() {
  TpReference r;
  r.x = random_matrix("x", kT, kIn);
  r.w = random_matrix("w", kOut, kIn);
  r.dy = random_matrix("dy", kT, kOut);
  model::HighPrecisionGemms gemms;
  model::LocalLinear local;
  r.dw = Tensor::zeros({kOut, kIn}, DType::F64);
  r.y = local.forward(r.x, r.w, gemms);
  r.dx = local.backward(r.dy, r.x, r.w, r.dw, gemms);
  return r;
}

void check_styles_on(const DeviceMesh& tp_mesh) {
  const int64_t tp = tp_mesh.size(), rank = tp_mesh.rank();
  const int64_t rows = kT / tp;
  auto group = std::make_shared<TensorParallelGroup>(tp_mesh.shared_comm());
  model::HighPrecisionGemms gemms;
  const TpReference ref = reference();
  CAPTURE(tp);
  CAPTURE(rank);

  SUBCASE("column-parallel") {
    ColumnParallelLinear column(group);
    const int64_t out = kOut / tp;
    Tensor w = ref.w.rows(rank * out, (rank + 1) * out).contiguous();
    Tensor x = ref.x.rows(rank * rows, (rank + 1) * rows).contiguous();
    Tensor y = column.forward(x, w, gemms);
    CHECK(max_abs_diff(y, tp_columns(ref.y, rank * out, out)) < 1e-12);
    Tensor dw = Tensor::zeros(w.shape(), DType::F64);
    Tensor dx = column.backward(tp_columns(ref.dy, rank * out, out), x, w, dw, gemms);
    CHECK(max_abs_diff(dx, ref.dx.rows(rank * rows, (rank + 1) * rows).contiguous()) < 1e-12);
    CHECK(max_abs_diff(dw, ref.dw.rows(rank * out, (rank + 1) * out).contiguous()) < 1e-12);
  }
  SUBCASE("row-parallel") {
    RowParallelLinear row(group);
    const int64_t in = kIn / tp;
    Tensor w = tp_columns(ref.w, rank * in, in);
    Tensor x = tp_columns(ref.x, rank * in, in);
    Tensor y = row.forward(x, w, gemms);
    CHECK(max_abs_diff(y, ref.y.rows(rank * rows, (rank + 1) * rows).contiguous()) < 1e-12);
    Tensor dw = Tensor::zeros(w.shape(), DType::F64);
    Tensor dx =
        row.backward(ref.dy.rows(rank * rows, (rank + 1) * rows).contiguous(), x, w, dw, gemms);
    CHECK(max_abs_diff(dx, tp_columns(ref.dx, rank * in, in)) < 1e-12);
    CHECK(max_abs_diff(dw, tp_columns(ref.dw, rank * in, in)) < 1e-12);
  }
}

int tp_world_size() {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("column- and row-parallel linears equal one rank's linear, tp 2") {
    REQUIRE(tp_world_size() == 8);
    check_styles_on(DeviceMesh::root(ParallelDims::resolve(2, 2, 2, 8), world_rank())[MeshDim::Tp]);
  }
  TEST_CASE("column- and row-parallel linears equal one rank's linear, tp 4") {
    REQUIRE(tp_world_size() == 8);
    check_styles_on(DeviceMesh::root(ParallelDims::resolve(1, 2, 4, 8), world_rank())[MeshDim::Tp]);
  }
}

}  // namespace titan::parallel
