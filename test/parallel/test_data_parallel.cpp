// parallelize(), FSDP, DDP and the global gradient norm called directly on 4 ranks, each against
// what it means on one rank (Megatron-LM tests each parallel module this way), so that a fault in
// one of them shows as that piece's mismatch and not only as a loss difference in a whole run:
//
//   parallelize   on dp_shard 2 × tp 2: every linear gets its plan's style and tp slice, a
//                 gathered parameter is exactly its tp slice of the one-process model, and one
//                 forward and backward give that model's loss and (summed over dp) its gradients
//   FSDP          on dp_shard 4 (the vocab rows do not split evenly: padding): each shard is its
//                 rows of the whole parameter, a gather gives back the whole parameter bit for
//                 bit, and the reduce-scatter gives each shard the sum over ranks of its rows
//   DDP           on dp_replicate 4: every rank holds the whole parameters, and the all-reduce
//                 sums each gradient over the replicas
//   grad norm     on FSDP 4, HSDP 2 × 2 and dp_shard 2 × tp 2: the norm of the whole gradient,
//                 with tp's slices each counted once and the sequence-parallel norms' partial
//                 gradients summed over tp first
//
// The gradients the collectives move are small integers, so every sum is exact and compared
// bit for bit. Run by ctest as mpirun -np 4 (test/CMakeLists.txt).
#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/parameter.h"
#include "model/transformer.h"
#include "parallel/device_mesh.h"
#include "parallel/grad_norm.h"
#include "parallel/parallel_dims.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel.h"
#include "support/mpi_world.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

namespace titan::parallel {
namespace {

using testing::world_rank;

constexpr uint64_t kSeed = 11;

DeviceMesh mesh_of(int64_t dp_replicate, int64_t dp_shard, int64_t tp) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE_MESSAGE(world == 4,
                  "the data-parallel tests run on 4 ranks (mpirun -np 4), got " << world);
  return DeviceMesh::root(ParallelDims::resolve(dp_replicate, dp_shard, tp, world), world_rank());
}

// The small model parallelized on a mesh of the 4 ranks and initialised from kSeed.
struct Parallelized {
  DeviceMesh mesh;
  model::Transformer model;
  ParallelModel parallel;
  Parallelized(int64_t dp_replicate, int64_t dp_shard, int64_t tp)
      : mesh(mesh_of(dp_replicate, dp_shard, tp)),
        model(testing::small_model_args(), DType::F32),
        parallel(parallelize(model, mesh, {})) {
    parallel.data_parallel->init_weights(kSeed);
  }
};

// The one-process model: every parameter whole, initialised from the same seed.
struct Whole {
  std::unique_ptr<model::Transformer> model;
  std::map<std::string, model::Parameter*> by_name;
  explicit Whole(const model::ModelArgs& args)
      : model(std::make_unique<model::Transformer>(args, DType::F32)) {
    for (model::Parameter* p : model->parameters()) {
      model::allocate_parameter(*p);
      model::init_parameter(*p, kSeed);
      by_name[p->name] = p;
    }
  }
};

// `full` (the whole parameter's shape, any dtype) cut to the tp slice `sliced` holds, through the
// one mapping between slices and whole parameters (model::for_each_local_run).
Tensor local_of(const model::Parameter& sliced, const Tensor& full) {
  const Shape local = sliced.local_shape();
  const int64_t rows = local[0], cols = local.ndim() == 2 ? local[1] : 1;
  const Tensor full2d = full.view({sliced.shape[0], sliced.cols()});
  Tensor out = Tensor::empty({rows, cols}, full.dtype());
  model::for_each_local_run(sliced, 0, rows, [&](const model::LocalRun& run) {
    out.narrow(0, run.local_offset, run.rows)
        .copy_from(full2d.narrow(0, run.full_row, run.rows).narrow(1, run.col_begin, run.width));
  });
  return out.view(local);
}

// Rows [s·R, (s+1)·R) of a [rows, …] tensor, zero past its end: FSDP shard s of it.
Tensor shard_rows(const Tensor& t, int64_t shard, int64_t shard_rows_count) {
  const int64_t cols = t.numel() / t.size(0);
  Tensor out = Tensor::zeros({shard_rows_count, cols}, t.dtype());
  const int64_t begin = std::min(t.size(0), shard * shard_rows_count);
  const int64_t end = std::min(t.size(0), begin + shard_rows_count);
  if (end > begin) {
    out.narrow(0, 0, end - begin)
        .copy_from(t.view({t.size(0), cols}).narrow(0, begin, end - begin));
  }
  return out;
}

// A whole parameter's element indices, as f64: what each local element is, in the whole.
Tensor index_of_elements(const model::Parameter& p) {
  std::vector<double> index(static_cast<size_t>(p.shape.numel()));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<double>(i);
  return Tensor::from_vector<double>(index, {p.shape.numel()});
}

// The gradient every test writes: a small integer of the element's place in the whole
// parameter, so that every sum the collectives make is exact.
float pattern(double whole_index) {
  return static_cast<float>(static_cast<int64_t>(whole_index) % 7);
}

// Runs the data-parallel hooks over every group as backward would (reverse order), writing into
// each gathered gradient `factor` × pattern of its whole index; then finish_gradients.
void backward_with_pattern(model::Transformer& model, DataParallel& dp, float factor,
                           const std::map<model::Parameter*, float>& extra = {}) {
  dp.zero_grad();
  std::vector<model::ParamGroup> groups = model.param_groups();
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
    dp.before_backward(g->id);
    for (model::Parameter* p : g->params) {
      const Tensor index = local_of(*p, index_of_elements(*p));
      float* grad = p->grad.data<float>();
      const auto it = extra.find(p);
      const float scale = factor * (it == extra.end() ? 1.0f : it->second);
      for (int64_t i = 0; i < p->grad.numel(); ++i) {
        grad[i] = scale * pattern(index.data<double>()[i]);
      }
    }
    dp.after_backward(g->id);
  }
  dp.finish_gradients();
}

// Σ over the whole parameters of (factor(p) × pattern)², in double: the whole gradient's norm².
double whole_norm_squared(model::Transformer& model,
                          const std::function<double(const model::Parameter&)>& factor) {
  double sum = 0;
  for (model::Parameter* p : model.parameters()) {
    const double f = factor(*p);
    for (int64_t i = 0; i < p->shape.numel(); ++i) {
      const double g = f * pattern(static_cast<double>(i));
      sum += g * g;
    }
  }
  return sum;
}

// The global gradient norm of what `parallel` steps equals the whole gradient's, each whole
// parameter's gradient `factor`(p) × pattern.
void check_whole_norm(Parallelized& on,
                      const std::function<double(const model::Parameter&)>& factor) {
  const double norm = global_grad_norm(on.parallel.data_parallel->optimizer_params(), on.mesh);
  CHECK(norm == doctest::Approx(std::sqrt(whole_norm_squared(on.model, factor))).epsilon(1e-12));
}

double ten(const model::Parameter&) { return 10.0; }

// Each shard FSDP steps on this rank against its rows of `expected` (the gradient its tp slice
// should hold, given the sliced parameter): bit for bit, or within `tolerance` relative L2.
void check_shard_grads(Parallelized& on,
                       const std::function<Tensor(const model::Parameter&)>& expected,
                       double tolerance) {
  const int64_t shard = on.mesh[kDpShardCp].rank();
  std::map<std::string, model::Parameter*> sliced;
  for (model::Parameter* p : on.model.parameters()) sliced[p->name] = p;
  for (model::Parameter* s : on.parallel.data_parallel->optimizer_params()) {
    CAPTURE(s->name);
    const Tensor rows = shard_rows(expected(*sliced.at(s->name)), shard, s->grad.size(0));
    if (tolerance == 0) {
      CHECK(testing::bitwise_equal(s->grad.view(rows.shape()), rows));
    } else {
      CHECK(testing::relative_l2_error(s->grad.view(rows.shape()), rows) < tolerance);
    }
  }
}

// `factor` × t, as a new f32 tensor.
Tensor times(float factor, const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = factor * t.data<float>()[i];
  return out;
}

TEST_CASE("parallelize: dp_shard 2 × tp 2 slices each linear by the plan and trains as one rank") {
  Parallelized on(1, 2, 2);
  const model::ModelArgs args = testing::small_model_args();
  const int64_t tp_rank = on.mesh.coordinate(MeshDim::Tp);
  model::Transformer& model = on.model;
  const ParallelModel& parallel = on.parallel;
  CHECK(parallel.data_parallel->describe().find("FSDP") != std::string::npos);
  CHECK_FALSE(parallel.tp_table.empty());
  for (model::Linear* linear : model.linears()) {
    CAPTURE(linear->fqn());
    const bool column = tp_plan_entry(linear->fqn()).style == TpStyle::ColumnParallel;
    CHECK(linear->style().name() == (column ? "column-parallel" : "row-parallel"));
    CHECK(linear->weight().slice.dim == (column ? 0 : 1));
    CHECK(linear->weight().slice.index == tp_rank);
    CHECK(linear->weight().slice.count == 2);
  }

  // One forward and backward of the same tokens on every rank, against the whole model's.
  Whole whole(args);
  const int64_t B = 2, S = 16;
  std::vector<int32_t> ids(static_cast<size_t>(B * (S + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 5) % 258);
  const Tensor window = Tensor::from_vector<int32_t>(ids, {B, S + 1});
  const Tensor inputs = window.narrow(1, 0, S).contiguous();
  const Tensor targets = window.narrow(1, 1, S).contiguous();
  const double scale = 1.0 / static_cast<double>(B * S);
  const double expected = whole.model->forward(inputs, targets, scale);
  whole.model->backward();
  parallel.data_parallel->zero_grad();
  const double loss = model.forward(inputs, targets, scale);
  model.backward();
  parallel.data_parallel->finish_gradients();
  CHECK(loss == doctest::Approx(expected).epsilon(1e-5));

  // Each shard's gradient: its rows of its tp slice of the whole gradient, summed over the two
  // dp_shard ranks (the same tokens on both: twice the whole gradient).
  check_shard_grads(
      on,
      [&](const model::Parameter& p) {
        return local_of(p, times(2.0f, whole.by_name.at(p.name)->grad));
      },
      1e-4);
}

TEST_CASE("FSDP: shards are rows of the whole parameter and a gather gives it back bit for bit") {
  Parallelized on(1, 4, 1);
  const model::ModelArgs args = testing::small_model_args();
  Whole whole(args);
  const int64_t shard = on.mesh[kDpShardCp].rank();
  for (model::Parameter* s : on.parallel.data_parallel->optimizer_params()) {
    CAPTURE(s->name);
    const Tensor& value = whole.by_name.at(s->name)->value;
    CHECK(testing::bitwise_equal(
        s->value.view({s->value.size(0), s->value.numel() / s->value.size(0)}),
        shard_rows(value, shard, s->value.size(0))));
  }
  // vocab 258 over 4 shards: 65 rows each, 2 of the last shard's padding.
  for (const model::ParamGroup& g : on.model.param_groups()) {
    on.parallel.data_parallel->before_forward(g.id);
    for (model::Parameter* p : g.params) {
      CAPTURE(p->name);
      CHECK(testing::bitwise_equal(p->value, whole.by_name.at(p->name)->value));
    }
    on.parallel.data_parallel->after_forward(g.id);
  }
}

TEST_CASE("FSDP: the reduce-scatter gives each shard the sum over the ranks of its rows") {
  Parallelized on(1, 4, 1);
  // Rank r writes (r + 1) × pattern: the sum over the 4 ranks is 10 × pattern.
  backward_with_pattern(on.model, *on.parallel.data_parallel, static_cast<float>(world_rank() + 1));
  check_shard_grads(
      on,
      [](const model::Parameter& p) {
        Tensor expected = Tensor::empty({p.shape.numel()}, DType::F32);
        for (int64_t i = 0; i < expected.numel(); ++i) {
          expected.data<float>()[i] = 10.0f * pattern(static_cast<double>(i));
        }
        return local_of(p, expected);
      },
      0);
  // The norm of the whole gradient, from the shards of 4 ranks.
  check_whole_norm(on, ten);
}

TEST_CASE("DDP: every rank holds the whole parameters and the all-reduce sums the gradients") {
  Parallelized on(4, 1, 1);
  const model::ModelArgs args = testing::small_model_args();
  CHECK(on.parallel.data_parallel->describe() == "DDP over dp_replicate");
  Whole whole(args);
  for (model::Parameter* p : on.model.parameters()) {
    CAPTURE(p->name);
    CHECK(testing::bitwise_equal(p->value, whole.by_name.at(p->name)->value));
  }
  backward_with_pattern(on.model, *on.parallel.data_parallel, static_cast<float>(world_rank() + 1));
  for (model::Parameter* p : on.model.parameters()) {
    CAPTURE(p->name);
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      REQUIRE(p->grad.data<float>()[i] == 10.0f * pattern(static_cast<double>(i)));
    }
  }
  check_whole_norm(on, ten);
}

TEST_CASE("grad norm: HSDP 2 × 2 and dp_shard 2 × tp 2 give the whole gradient's norm") {
  {
    Parallelized on(2, 2, 1);
    // Summed over dp_shard by the reduce-scatter and over dp_replicate by the all-reduce.
    backward_with_pattern(on.model, *on.parallel.data_parallel,
                          static_cast<float>(world_rank() + 1));
    check_whole_norm(on, ten);
  }
  {
    Parallelized on(1, 2, 2);
    const int64_t dp = on.mesh.coordinate(MeshDim::DpShard), tp = on.mesh.coordinate(MeshDim::Tp);
    // A tp slice holds its own elements: over dp its gradient sums to 3 × pattern. A norm's
    // weight is whole on every tp rank, each with its own tokens' part: tp rank t writes (t + 1)
    // of it, summed over tp (3) and then over dp (3): 9 × pattern. Counted once each, the norm
    // is the whole gradient's.
    std::map<model::Parameter*, float> replicated;
    for (model::Parameter* p : on.model.parameters()) {
      if (p->tp_replicated()) replicated[p] = static_cast<float>(tp + 1);
    }
    backward_with_pattern(on.model, *on.parallel.data_parallel, static_cast<float>(dp + 1),
                          replicated);
    check_whole_norm(on, [](const model::Parameter& p) { return p.tp_replicated() ? 9.0 : 3.0; });
  }
}

}  // namespace
}  // namespace titan::parallel
