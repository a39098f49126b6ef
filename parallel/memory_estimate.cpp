#include "parallel/memory_estimate.h"

#include <algorithm>

#include "core/check.h"
#include "model/transformer.h"
#include "parallel/fsdp.h"  // defines: kFsdpPrefetchGroups
#include "parallel/owned_rows.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel.h"  // defines: kCpuProgressSlices

namespace titan::parallel {

namespace {

using Bytes = MemoryTimeline::Bytes;
using model::GemmKind;
using model::GemmsMemory;
using model::LinearShape;
using model::PreparedOperand;

double d(int64_t v) { return static_cast<double>(v); }

constexpr double kMasterBytes = 4;  // fp32 parameters, gradients, moments, reduce-scatters

// tensor_parallel.cpp's run_rows: the CPU cuts a chunk GEMM into up to kCpuProgressSlices row
// slices; the largest is the one whose buffers count.
int64_t largest_slice(int64_t rows, bool cuda) {
  const int64_t slices = cuda ? 1 : std::clamp<int64_t>(rows, 1, kCpuProgressSlices);
  int64_t most = 0;
  for (int64_t i = 0; i < slices; ++i)
    most = std::max(most, rows * (i + 1) / slices - rows * i / slices);
  return most;
}

}  // namespace

ParallelLayout parallel_layout(const model::ModelArgs& args, const ParallelMemoryOptions& options) {
  const int64_t tp = options.dims.tp;
  check_tensor_parallel_fit(args, tp, "parallelism.tp");
  // A declared model has no storage: this is the model parallelize() would shard.
  model::Transformer model(args, DType::F32);
  ParallelLayout layout;
  for (model::Linear* linear : model.linears()) {
    const bool column = tp_plan_entry(linear->fqn()).style == TpStyle::ColumnParallel;
    if (tp > 1) linear->weight().slice = {column ? 0 : 1, 0, tp};
  }
  for (model::Parameter* p : model.parameters()) {
    if (tp > 1 && p->name == "tok_embeddings.weight") p->slice = {0, 0, tp};
  }
  fp8::Float8Options float8 = options.float8;
  float8.weight_cache = nullptr;
  layout.float8 = fp8::convert_to_float8(model, float8, nullptr);
  const bool coded_gather =
      options.float8.enabled && options.float8_all_gather && options.shard_degree() > 1;
  for (model::Linear* linear : model.linears()) {
    const Shape local = linear->weight().local_shape();
    LinearLayout l;
    l.column = tp_plan_entry(linear->fqn()).style == TpStyle::ColumnParallel;
    l.weight = {local[0], local[1]};
    l.float8 = std::find(layout.float8.converted.begin(), layout.float8.converted.end(),
                         linear->fqn()) != layout.float8.converted.end();
    layout.linears[linear->fqn()] = l;
  }
  for (const model::ParamGroup& group : model.param_groups()) {
    if (!options.group_ids.empty() && std::find(options.group_ids.begin(), options.group_ids.end(),
                                                group.id) == options.group_ids.end()) {
      continue;
    }
    ParamGroupLayout g;
    g.name = group.name;
    g.id = group.id;
    for (const model::Parameter* p : group.params) {
      const Shape local = p->local_shape();
      ParamLayout pl;
      pl.name = p->name;
      pl.rows = local[0];
      pl.cols = local.ndim() == 2 ? local[1] : 1;
      pl.coded = coded_gather &&
                 std::find(layout.float8.weights.begin(), layout.float8.weights.end(), p) !=
                     layout.float8.weights.end();
      g.params.push_back(pl);
    }
    layout.groups.push_back(std::move(g));
  }
  return layout;
}

// FullyShardedDataParallel's hooks (fsdp.cpp), group by group.
class ParallelModelMemory::Fsdp final : public model::ParamHooksMemory {
 public:
  Fsdp(const ParallelLayout& layout, const ParallelMemoryOptions& options)
      : options_(options),
        compute_(static_cast<double>(dtype_size(options.compute_dtype))),
        defer_(options.dims.pp > 1) {
    shards_ = options.shard_degree();
    for (const ParamGroupLayout& pg : layout.groups) {
      index_of_id_[pg.id] = static_cast<int>(groups_.size());
      Group g;
      g.name = pg.name;
      for (const ParamLayout& p : pg.params) {
        Param sp;
        sp.layout = p;
        sp.shard_rows = fsdp_shard_rows(p.rows, shards_);
        (p.coded ? g.code_numel : g.value_numel) += sp.shard_rows * p.cols;
        g.shard_numel += sp.shard_rows * p.cols;
        g.params.push_back(sp);
      }
      groups_.push_back(std::move(g));
    }
  }

  // The groups are numbered by their id in the whole model; a pipeline rank holds some of them,
  // and a prefetch reaches only the next id it holds.
  void before_forward(MemoryTimeline& t, int id) override {
    materialize(t, group(id));
    for (int next = id + 1; next <= id + kFsdpPrefetchGroups; ++next) {
      if (!index_of_id_.contains(next)) break;
      post_gather(t, group(next));
    }
  }

  void after_forward(MemoryTimeline&, int id) override {
    Group& g = group(id);
    const bool head = g.name == model::kHeadGroupName;
    if (options_.reshard_after_forward && !head) release_values(g);
  }

  void before_backward(MemoryTimeline& t, int id) override {
    Group& g = group(id);
    materialize(t, g);
    for (int next = id - 1; next >= id - kFsdpPrefetchGroups; --next) {
      if (!index_of_id_.contains(next)) break;
      post_gather(t, group(next));
    }
    // Deferred (pp > 1), the gradients accumulate over the step's micro-batches: made once.
    MemoryTimeline::Tag tag(t, MemoryCategory::GatheredParameters);
    for (Param& p : g.params) {
      if (defer_ && p.grad.held()) continue;
      p.grad = t.hold(d(p.layout.rows) * d(p.layout.cols) * kMasterBytes);
    }
  }

  void after_backward(MemoryTimeline& t, int id) override {
    Group& g = group(id);
    if (defer_) {
      release_values(g);
      return;
    }
    if (reduce_in_flight_ >= 0) drain_reduce(groups_[static_cast<size_t>(reduce_in_flight_)]);
    drain_reduce(g);
    release_values(g);
    post_reduce(t, g);
    reduce_in_flight_ = index_of_id_.at(id);
  }

  void zero_grad() {
    for (Group& g : groups_) drain_reduce(g);
  }
  void finish_gradients(MemoryTimeline& t) {
    if (defer_) {
      // Every group with gradients once, in backward order, one reduce-scatter in flight
      // besides the one posted.
      Group* in_flight = nullptr;
      for (auto g = groups_.rbegin(); g != groups_.rend(); ++g) {
        if (!g->params.front().grad.held()) continue;
        if (in_flight != nullptr) drain_reduce(*in_flight);
        post_reduce(t, *g);
        in_flight = &*g;
      }
    }
    for (Group& g : groups_) drain_reduce(g);
    reduce_in_flight_ = -1;
  }
  void on_weights_updated(MemoryTimeline& t) {
    if (!options_.precompute_float8_scales) return;
    int64_t coded = 0;
    for (const Group& g : groups_) {
      for (const Param& p : g.params) coded += p.layout.coded ? 1 : 0;
    }
    if (coded > 0) codec_.update(t, coded, all_scales_);
  }

 private:
  struct Param {
    ParamLayout layout;
    int64_t shard_rows = 0;
    Bytes full, value, grad;  // while gathered: all shards (values or codes); decoded values
  };
  struct Group {
    std::string name;
    std::vector<Param> params;
    int64_t shard_numel = 0, value_numel = 0, code_numel = 0;
    Bytes packed, gather_buffer, codes, code_buffer, reduce_send, reduce_out;
    Bytes scales;  // the float8 all-gather's scales of the group's coded weights
    bool gather_posted = false, materialized = false, reduce_posted = false;
  };

  Group& group(int id) { return groups_[static_cast<size_t>(index_of_id_.at(id))]; }

  // The packed gradients, the unsharded ones let go, the reduce-scatter's output.
  void post_reduce(MemoryTimeline& t, Group& g) {
    {
      MemoryTimeline::Tag tag(t, MemoryCategory::GatheredParameters);
      g.reduce_send = t.hold(d(shards_) * d(g.shard_numel) * kMasterBytes);
    }
    for (Param& p : g.params) p.grad = {};
    MemoryTimeline::Tag tag(t, MemoryCategory::CommBuffers);
    g.reduce_out = t.hold(d(g.shard_numel) * kMasterBytes);
    g.reduce_posted = true;
  }

  void post_gather(MemoryTimeline& t, Group& g) {
    if (g.gather_posted || g.materialized) return;
    {
      // The send buffer lives as long as the collective holds it: until the gather is waited on.
      MemoryTimeline::Tag tag(t, MemoryCategory::CommBuffers);
      g.packed = t.hold(d(g.value_numel) * compute_);
    }
    {
      MemoryTimeline::Tag tag(t, MemoryCategory::GatheredParameters);
      g.gather_buffer = t.hold(d(shards_) * d(g.value_numel) * compute_);
    }
    if (g.code_numel > 0) {
      if (!options_.precompute_float8_scales) {
        int64_t coded = 0;
        for (const Param& p : g.params) coded += p.layout.coded ? 1 : 0;
        codec_.update(t, coded, g.scales);
      }
      {
        MemoryTimeline::Tag tag(t, MemoryCategory::CommBuffers);
        g.codes = t.hold(d(g.code_numel));
        for (const Param& p : g.params) {
          if (p.layout.coded) codec_.encode(t, p.shard_rows * p.layout.cols);
        }
      }
      MemoryTimeline::Tag tag(t, MemoryCategory::GatheredParameters);
      g.code_buffer = t.hold(d(shards_) * d(g.code_numel));
    }
    g.gather_posted = true;
  }

  void materialize(MemoryTimeline& t, Group& g) {
    if (g.materialized) return;
    post_gather(t, g);
    g.packed = {};  // the waits complete the collectives, which let their send buffers go
    g.codes = {};
    for (Param& p : g.params) {
      const double n = d(p.shard_rows) * d(p.layout.cols);
      MemoryTimeline::Tag tag(
          t, p.layout.coded ? MemoryCategory::Fp8Cache : MemoryCategory::GatheredParameters);
      p.full = t.hold(d(shards_) * n * (p.layout.coded ? 1 : compute_));
      if (p.layout.coded) p.value = codec_.decode(t, p.layout.rows, p.layout.cols, compute_);
    }
    g.gather_buffer = {};
    g.code_buffer = {};
    g.gather_posted = false;
    g.materialized = true;
  }

  void release_values(Group& g) {
    if (!g.materialized) return;
    for (Param& p : g.params) {
      p.full = {};
      p.value = {};
    }
    g.materialized = false;
  }

  void drain_reduce(Group& g) {
    if (!g.reduce_posted) return;
    g.reduce_send = {};
    g.reduce_out = {};
    g.reduce_posted = false;
  }

  ParallelMemoryOptions options_;
  double compute_;
  bool defer_;  // pipeline parallelism: gradients reduce-scattered once, in finish_gradients
  int64_t shards_ = 1;
  std::vector<Group> groups_;
  std::map<int, int> index_of_id_;
  int reduce_in_flight_ = -1;
  fp8::Float8AllGatherMemory codec_;
  Bytes all_scales_;  // every coded weight's scale, precomputed after each optimizer step
};

// ColumnParallelLinear and RowParallelLinear (tensor_parallel.cpp), synchronous or async.
class ParallelModelMemory::TensorParallelStyle final : public model::LinearMemory {
 public:
  TensorParallelStyle(bool column, int64_t tp, bool async, bool cuda)
      : column_(column), n_(tp), async_(async), cuda_(cuda) {}

  Bytes forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                GemmsMemory& gemms) override {
    return column_ ? column_forward(t, rows, w, e, gemms) : row_forward(t, rows, w, e, gemms);
  }
  Bytes backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                 GemmsMemory& gemms, const Bytes& dy, const Bytes& x) override {
    return column_ ? column_backward(t, rows, w, e, gemms, dy)
                   : row_backward(t, rows, w, e, gemms, x);
  }

 private:
  // gathered_operand: the operand's layout with tp times the rows (values, then row scales).
  std::vector<Bytes> gathered(MemoryTimeline& t, const PreparedOperand& local, int64_t rows) const {
    std::vector<Bytes> full{t.hold(d(rows * n_) * local.row_bytes)};
    if (local.row_scale_bytes > 0) full.push_back(t.hold(d(rows * n_) * local.row_scale_bytes));
    return full;
  }

  // gather_rows of tensors with these bytes per row, `rows` of them this rank's: the
  // synchronous all-gather sends a copy of this rank's rows, held until every gather completes;
  // the ring sends views. on_chunk runs once per chunk, after the gathers.
  template <class OnChunk>
  void gather_rows(MemoryTimeline& t, const std::vector<double>& row_bytes, int64_t rows,
                   OnChunk on_chunk) const {
    if (!async_) {
      std::vector<Bytes> sends;
      for (double b : row_bytes) sends.push_back(t.hold(d(rows) * b));
      sends.clear();
    }
    on_chunk();
  }

  // reduce_scatter_rows_of: n received and n − 1 sent chunks [rows, cols], the GEMMs, the sum.
  template <class Compute, class BeforeSum>
  Bytes reduce_scatter(MemoryTimeline& t, int64_t rows, int64_t cols, double e, Compute compute,
                       BeforeSum before_sum) const {
    std::vector<Bytes> chunks;
    for (int64_t i = 0; i < 2 * n_ - 1; ++i) chunks.push_back(t.hold(d(rows) * d(cols) * e));
    compute();
    before_sum();
    return t.hold(d(rows) * d(cols) * e);  // received[0].clone(), the partials then summed in
  }

  Bytes column_forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                       GemmsMemory& gemms) const {
    const PreparedOperand a_local = gemms.prepare_a(t, GemmKind::Output, rows, w.in, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::Output, w.out, w.in, e);
    const std::vector<Bytes> a = gathered(t, a_local, rows);  // [T, in]
    Bytes y = t.hold(d(rows * n_) * d(w.out) * e);
    std::vector<double> wire{a_local.row_bytes};
    if (a_local.row_scale_bytes > 0) wire.push_back(a_local.row_scale_bytes);
    gather_rows(t, wire, rows,
                [&] { gemms.run(t, GemmKind::Output, largest_slice(rows, cuda_), w.out, w.in); });
    return y;
  }

  // dy: its bytes, the grad-weight GEMM's operand beside the gathered x.
  Bytes column_backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                        GemmsMemory& gemms, const Bytes& dy) const {
    const PreparedOperand a = gemms.prepare_a(t, GemmKind::GradInput, rows * n_, w.out, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::GradInput, w.out, w.in, e);
    const Bytes x_full = t.hold(d(rows * n_) * d(w.in) * e);
    Bytes x_send;  // the synchronous gather's copy of x, until before_sum waits for it
    if (!async_) x_send = t.hold(d(rows) * d(w.in) * e);
    return reduce_scatter(
        t, rows, w.in, e,
        [&] { gemms.run(t, GemmKind::GradInput, largest_slice(rows, cuda_), w.in, w.out); },
        [&] {
          x_send = {};
          gemms.whole(t, GemmKind::GradWeight, rows * n_, w.out, rows * n_, w.in, w.out, w.in,
                      rows * n_, e, dy, x_full);
        });
  }

  Bytes row_forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                    GemmsMemory& gemms) const {
    const int64_t out_rows = rows / n_;
    const PreparedOperand a = gemms.prepare_a(t, GemmKind::Output, rows, w.in, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::Output, w.out, w.in, e);
    return reduce_scatter(
        t, out_rows, w.out, e,
        [&] { gemms.run(t, GemmKind::Output, largest_slice(out_rows, cuda_), w.out, w.in); },
        [] {});
  }

  // x: its bytes, the grad-weight GEMM's operand beside the gathered dy.
  Bytes row_backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                     GemmsMemory& gemms, const Bytes& x) const {
    const int64_t dy_rows = rows / n_;
    const PreparedOperand a_local = gemms.prepare_a(t, GemmKind::GradInput, dy_rows, w.out, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::GradInput, w.out, w.in, e);
    const Bytes dy_full = t.hold(d(rows) * d(w.out) * e);
    std::vector<double> wire{d(w.out) * e};
    std::vector<Bytes> a;
    if (!a_local.plain) {
      a = gathered(t, a_local, dy_rows);
      wire.push_back(a_local.row_bytes);
      if (a_local.row_scale_bytes > 0) wire.push_back(a_local.row_scale_bytes);
    }
    Bytes dx = t.hold(d(rows) * d(w.in) * e);
    gather_rows(t, wire, dy_rows, [&] {
      gemms.run(t, GemmKind::GradInput, largest_slice(dy_rows, cuda_), w.in, w.out);
    });
    gemms.whole(t, GemmKind::GradWeight, rows, w.out, rows, w.in, w.out, w.in, rows, e, dy_full, x);
    return dx;
  }

  bool column_;
  int64_t n_;
  bool async_, cuda_;
};

ParallelModelMemory::ParallelModelMemory(const model::ModelArgs& args,
                                         const ParallelMemoryOptions& options,
                                         MemoryTimeline& timeline)
    : layout_(parallel_layout(args, options)), options_(options) {
  MemoryTimeline& t = timeline;
  const bool fsdp = options.shard_degree() > 1;
  const double compute = static_cast<double>(dtype_size(options.compute_dtype));
  // The parameters and gradients (FSDP's shards, or the whole tp slices with their working copy
  // in the compute dtype), then AdamW's two moments of what the optimizer steps.
  std::vector<double> stepped;
  for (const ParamGroupLayout& g : layout_.groups) {
    for (const ParamLayout& p : g.params) {
      const int64_t rows = fsdp ? fsdp_shard_rows(p.rows, options.shard_degree()) : p.rows;
      const double n = d(rows) * d(p.cols);
      state_.push_back(t.hold(MemoryCategory::Parameters, n * kMasterBytes));
      state_.push_back(t.hold(MemoryCategory::Gradients, n * kMasterBytes));
      if (!fsdp && options.compute_dtype != DType::F32) {
        state_.push_back(t.hold(MemoryCategory::Parameters, n * compute));
      }
      stepped.push_back(n);
    }
  }
  for (double n : stepped) {
    state_.push_back(t.hold(MemoryCategory::OptimizerState, n * kMasterBytes));
    state_.push_back(t.hold(MemoryCategory::OptimizerState, n * kMasterBytes));
  }
  if (fsdp) fsdp_ = std::make_unique<Fsdp>(layout_, options);
  local_ = std::make_unique<model::LocalLinearMemory>();
  if (options.dims.tp > 1) {
    column_ = std::make_unique<TensorParallelStyle>(true, options.dims.tp,
                                                    options.async_tensor_parallel, options.cuda);
    row_ = std::make_unique<TensorParallelStyle>(false, options.dims.tp,
                                                 options.async_tensor_parallel, options.cuda);
  }
  high_precision_ = std::make_unique<model::HighPrecisionGemmsMemory>(options.bf16_gemm_operands);
  if (options.float8.enabled) {
    fp8::Float8MemoryOptions f;
    f.recipe = options.float8.recipe;
    f.tp_amax = options.dims.tp > 1;
    f.activation_amax = options.dims.cp > 1;
    f.gathered_weights = options.float8_all_gather && fsdp;
    f.cuda = options.cuda;
    float8_ = std::make_unique<fp8::Float8GemmsMemory>(f);
  }
}

ParallelModelMemory::~ParallelModelMemory() = default;

model::ParamHooksMemory& ParallelModelMemory::hooks() {
  if (fsdp_) return *fsdp_;
  return replicated_;
}

model::LinearSeamsFor ParallelModelMemory::linears() {
  return [this](const std::string& fqn) {
    const auto it = layout_.linears.find(fqn);
    TT_CHECK(it != layout_.linears.end(), "memory estimate: no linear '", fqn, "'");
    model::LinearSeams seams;
    seams.weight = it->second.weight;
    seams.style = options_.dims.tp == 1 ? local_.get()
                  : it->second.column   ? static_cast<model::LinearMemory*>(column_.get())
                                        : static_cast<model::LinearMemory*>(row_.get());
    seams.gemms = it->second.float8 ? float8_.get() : high_precision_.get();
    return seams;
  };
}

void ParallelModelMemory::zero_grad(MemoryTimeline&) {
  if (fsdp_) fsdp_->zero_grad();
}

void ParallelModelMemory::finish_gradients(MemoryTimeline& t) {
  // FSDP's waits (and, under pp, its one reduce-scatter per group), then (HSDP, DDP,
  // tp-replicated gradients) all-reduces in place: on the CPU in f32 and on CUDA through NCCL,
  // neither of which stages a copy.
  if (fsdp_) fsdp_->finish_gradients(t);
}

void ParallelModelMemory::on_weights_updated(MemoryTimeline& t) {
  if (fsdp_) fsdp_->on_weights_updated(t);
}

}  // namespace titan::parallel
