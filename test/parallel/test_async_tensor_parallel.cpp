// Async TP (the ring schedule of parallel/tensor_parallel.h) against synchronous TP and against
// the plain collective + one whole GEMM, on tp groups of 2, 3, 4 and 8 cut from the 8 ranks, for
// f32, emulated bf16 and every FP8 recipe, forward and backward:
//
//   async == synchronous        bit for bit (same operands, same GEMM chunks, same sum order)
//   synchronous ≈ plain         all-gather / reduce-scatter + one GEMM of the whole tensor, to
//                               a few fp32 roundings: OpenBLAS's sgemm on a row block can differ
//                               in the last bit from those rows of the whole GEMM, and the MPI
//                               reduce-scatter adds the ranks in its own order
//
// and, on tp 2 with chunks past MPI's eager limit, that the ring's transfers complete while the
// GEMM slices run (a test between slices finds them done), not in the wait after them.
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "core/rng.h"
#include "core/tensor.h"
#include "fp8/float8_linear.h"
#include "fp8/recipe.h"
#include "model/linear.h"
#include "parallel/amax_reduction.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/tensor_parallel.h"

namespace titan::parallel {
namespace {

// f32 values that differ per rank and per name (seeded by both).
Tensor random_matrix(const std::string& name, int64_t rank, int64_t rows, int64_t cols,
                     double scale = 1.0) {
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  CounterRng rng(11 + static_cast<uint64_t>(rank), name);
  for (int64_t i = 0; i < rows * cols; ++i) {
    t.data<float>()[i] = static_cast<float>(scale * rng.normal(static_cast<uint64_t>(i)));
  }
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()) == 0;
}

// max |a − b| / max |b|
double ring_relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  }
  return diff / std::max(scale, 1e-30);
}

std::shared_ptr<model::LinearGemms> gemms_for(const std::string& recipe,
                                              const std::shared_ptr<Communicator>& tp) {
  if (recipe == "f32") return std::make_shared<model::HighPrecisionGemms>();
  if (recipe == "bf16") return std::make_shared<model::HighPrecisionGemms>(true);
  return std::make_shared<fp8::Float8Gemms>(
      fp8::make_recipe(fp8::kRecipeNames.parse(recipe, "recipe")),
      std::make_shared<CommAmaxReduction>(tp));
}

// tp groups of `tp` consecutive world ranks (the last may be smaller: 8 = 3 + 3 + 2).
std::shared_ptr<Communicator> tp_group(int tp) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return split_world_communicator(rank / tp, rank, "tp");
}

// Rows per chunk; dims multiples of 16 (FP8) with a K past one 128 block (blockwise).
constexpr int64_t kRows = 8, kRingIn = 256, kRingOut = 160;

struct LinearResults {
  Tensor y, dx, dw;
};

// Forward and backward through both styles: async must give synchronous TP's bits. Returns
// the synchronous results.
LinearResults check_same_bits(model::LinearStyle& sync, model::LinearStyle& async, const Tensor& x,
                              const Tensor& w, const Tensor& dy, model::LinearGemms& gemms) {
  LinearResults s;
  s.y = sync.forward(x, w, gemms);
  CHECK(same_bits(async.forward(x, w, gemms), s.y));
  s.dw = Tensor::zeros(w.shape(), DType::F32);
  Tensor dw_async = s.dw.clone();
  s.dx = sync.backward(dy, x, w, s.dw, gemms);
  CHECK(same_bits(async.backward(dy, x, w, dw_async, gemms), s.dx));
  CHECK(same_bits(dw_async, s.dw));
  return s;
}

void check_column_parallel(const std::shared_ptr<Communicator>& comm, const std::string& recipe) {
  const int64_t n = comm->size(), r = comm->rank(), T = kRows * n;
  auto group = std::make_shared<TensorParallelGroup>(comm);
  auto gemms = gemms_for(recipe, comm);
  const Tensor x = random_matrix("x", r, kRows, kRingIn);
  const Tensor w = random_matrix("w", r, kRingOut, kRingIn, 0.1);
  const Tensor dy = random_matrix("dy", r, T, kRingOut, 0.01);
  ColumnParallelLinear sync(group, false), async(group, true);
  const auto [y_sync, dx_sync, dw_sync] = check_same_bits(sync, async, x, w, dy, *gemms);

  // The plain collectives and one GEMM each.
  const Tensor x_full = group->all_gather_rows(x);
  Tensor y = Tensor::empty({T, kRingOut}, DType::F32);
  gemms->output(y, x_full, w);
  Tensor dx_partial = Tensor::empty({T, kRingIn}, DType::F32);
  gemms->grad_input(dx_partial, dy, w);
  const Tensor dx = group->reduce_scatter_rows(dx_partial);
  Tensor dw = Tensor::zeros(w.shape(), DType::F32);
  gemms->grad_weight(dw, dy, x_full);
  CHECK(ring_relative_error(y_sync, y) < 1e-5);
  CHECK(ring_relative_error(dx_sync, dx) < 1e-5);
  CHECK(ring_relative_error(dw_sync, dw) < 1e-5);
}

void check_row_parallel(const std::shared_ptr<Communicator>& comm, const std::string& recipe) {
  const int64_t n = comm->size(), r = comm->rank(), T = kRows * n;
  auto group = std::make_shared<TensorParallelGroup>(comm);
  auto gemms = gemms_for(recipe, comm);
  const Tensor x = random_matrix("x", r, T, kRingIn);
  const Tensor w = random_matrix("w", r, kRingOut, kRingIn, 0.1);
  const Tensor dy = random_matrix("dy", r, kRows, kRingOut, 0.01);
  RowParallelLinear sync(group, false), async(group, true);
  const auto [y_sync, dx_sync, dw_sync] = check_same_bits(sync, async, x, w, dy, *gemms);

  Tensor y_partial = Tensor::empty({T, kRingOut}, DType::F32);
  gemms->output(y_partial, x, w);
  const Tensor y = group->reduce_scatter_rows(y_partial);
  const Tensor dy_full = group->all_gather_rows(dy);
  Tensor dx = Tensor::empty({T, kRingIn}, DType::F32);
  gemms->grad_input(dx, dy_full, w);
  Tensor dw = Tensor::zeros(w.shape(), DType::F32);
  gemms->grad_weight(dw, dy_full, x);
  CHECK(ring_relative_error(y_sync, y) < 1e-5);
  CHECK(ring_relative_error(dx_sync, dx) < 1e-5);
  CHECK(ring_relative_error(dw_sync, dw) < 1e-5);
}

const char* const kRecipes[] = {"f32",      "bf16", "tensorwise", "rowwise", "rowwise_with_gw_hp",
                                "blockwise"};

TEST_CASE("async tp: ring schedules equal synchronous TP bit for bit on tp 2 3 4 8") {
  for (int tp : {2, 3, 4, 8}) {
    const std::shared_ptr<Communicator> comm = tp_group(tp);
    for (const char* recipe : kRecipes) {
      CAPTURE(tp);
      CAPTURE(comm->size());
      CAPTURE(recipe);
      check_column_parallel(comm, recipe);
      check_row_parallel(comm, recipe);
    }
  }
}

TEST_CASE("async tp: a ring chunk of an FP8 operand carries its rows' scales") {
  const std::shared_ptr<Communicator> comm = tp_group(4);
  for (const char* recipe : {"tensorwise", "rowwise", "blockwise"}) {
    CAPTURE(recipe);
    auto gemms = gemms_for(recipe, comm);
    const Tensor x = random_matrix("x", comm->rank(), 4 * kRows, kRingIn);
    const model::GemmOperand a = gemms->prepare_a(model::GemmKind::Output, x);
    const model::GemmOperand block = a.row_block(kRows, 2 * kRows);
    CHECK(block.values.size(0) == kRows);
    if (std::string(recipe) == "tensorwise") {
      CHECK(!block.row_scales.defined());
      CHECK(block.shared_scales.numel() == 1);
      CHECK(block.wire().size() == 1);  // the scale is the same on every rank: it stays put
    } else {
      CHECK(block.row_scales.size(0) == kRows);
      CHECK(block.wire().size() == 2);
      CHECK(block.row_scales.data<float>()[0] ==
            a.row_scales.rows(kRows, kRows + 1).data<float>()[0]);
    }
  }
}

TEST_CASE("async tp: on the CPU the ring's transfers complete during the GEMM slices") {
  // tp 2, chunks of 256 × 1024 f32 (1 MiB, far past the shared-memory eager limit): MPI moves
  // them only while the ranks test between GEMM slices.
  const std::shared_ptr<Communicator> comm = tp_group(2);
  auto group = std::make_shared<TensorParallelGroup>(comm);
  model::HighPrecisionGemms gemms;
  const int64_t rows = 256, in = 1024, out = 1024;
  const Tensor x = random_matrix("x", comm->rank(), rows, in);
  const Tensor w = random_matrix("w", comm->rank(), out, in, 0.03);
  ColumnParallelLinear async(group, true);
  // A rendezvous transfer completes during a rank's GEMMs when its partner is already there to
  // move it (waiting, or testing between its own slices): the later of the two ranks sees it.
  // Left to themselves the pair can keep one order forward after forward (a fresh clone's run,
  // 8 ranks on 2 cores: rank 0 saw 30 of 30, rank 1 none), so the ranks take turns to start
  // 20 ms late. 8 ranks share 2 cores, so the partner may still not be scheduled: repeat (both
  // ranks of the pair alike) until some transfer of each rank completed during its GEMMs.
  // Without the tests between slices none ever would.
  int repeats = 0;
  int64_t during_compute = 0;
  while (repeats < 30) {
    if (repeats % 2 == comm->rank()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    async.forward(x, w, gemms);
    ++repeats;
    const CommStats so_far = group->waits().take();
    during_compute += so_far.finished_during_compute;
    Tensor least = Tensor::from_vector<int32_t>({during_compute > 0 ? 0 : 1}, {1});
    comm->all_reduce(least, ReduceOp::Max);  // 0 once both ranks saw one
    if (least.data<int32_t>()[0] == 0) break;
  }
  MESSAGE("rank ", comm->rank(), ": ", during_compute, " of ", repeats,
          " ring transfers done during the GEMMs");
  CHECK(during_compute >= 1);
}

}  // namespace
}  // namespace titan::parallel
