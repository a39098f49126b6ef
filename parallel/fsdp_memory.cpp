#include "parallel/fsdp_memory.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "parallel/fsdp.h"  // defines: kFsdpPrefetchGroups
#include "parallel/owned_rows.h"

namespace titan::parallel {

namespace {

using Bytes = MemoryTimeline::Bytes;

using replay::d;

using replay::kMasterBytes;

// FullyShardedDataParallel's hooks (fsdp.cpp), group by group.
class Fsdp final : public FsdpMemory {
 public:
  Fsdp(const ParallelLayout& layout, const ParallelMemoryOptions& options)
      : options_(options),
        compute_(static_cast<double>(dtype_size(options.compute_dtype))),
        defer_(options.dims.pp > 1 &&
               options.pipeline_gradient_reduction == PipelineGradientReduction::Step) {
    shards_ = options.shard_degree();
    for (const ParamGroupLayout& pg : layout.groups) {
      index_of_id_[pg.id] = static_cast<int>(groups_.size());
      Group g;
      g.name = pg.name;
      g.read_by_head = pg.read_by_head;
      for (const ParamLayout& p : pg.params) {
        Param sp;
        sp.layout = p;
        sp.shard_rows = fsdp_shard_rows(p.rows, shards_);
        (p.coded ? g.code_numel : g.value_numel) += sp.shard_rows * p.cols;
        if (p.trained) g.shard_numel += sp.shard_rows * p.cols;
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
    if (options_.reshard_after_forward && !head && !g.read_by_head) release_values(g);
  }

  void before_backward(MemoryTimeline& t, int id) override { before_backward_input(t, id, {}); }
  void before_backward_input(MemoryTimeline& t, int id,
                             const std::vector<std::string>& deferred) override {
    Group& g = group(id);
    materialize(t, g);
    for (int next = id - 1; next >= id - kFsdpPrefetchGroups; --next) {
      if (!index_of_id_.contains(next)) break;
      post_gather(t, group(next));
    }
    make_gradients(t, g, defer_ ? std::vector<std::string>{} : deferred);
  }

  void after_backward(MemoryTimeline& t, int id) override {
    Group& g = group(id);
    release_values(g);
    if (!defer_) reduce_now(t, g);
  }

  void after_backward_input(MemoryTimeline&, int id, const std::vector<std::string>&) override {
    release_values(group(id));
  }
  void before_weight_gradients(MemoryTimeline& t, int id) override {
    make_gradients(t, group(id), {});
  }
  void after_weight_gradients(MemoryTimeline& t, int id) override {
    if (!defer_) reduce_now(t, group(id));
  }

  void zero_grad() override {
    for (Group& g : groups_) drain_reduce(g);
  }
  void finish_gradients(MemoryTimeline& t) override {
    if (defer_) {
      // Every group with gradients once, in backward order, one reduce-scatter in flight
      // besides the one posted.
      Group* in_flight = nullptr;
      for (auto g = groups_.rbegin(); g != groups_.rend(); ++g) {
        if (std::none_of(g->params.begin(), g->params.end(),
                         [](const Param& p) { return p.grad.held(); })) {
          continue;
        }
        if (in_flight != nullptr) drain_reduce(*in_flight);
        post_reduce(t, *g);
        in_flight = &*g;
      }
    }
    for (Group& g : groups_) drain_reduce(g);
    reduce_in_flight_ = -1;
  }
  void on_weights_updated(MemoryTimeline& t) override {
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
    bool read_by_head = false;  // the tied embedding of a part with both ends
    std::vector<Param> params;
    int64_t shard_numel = 0, value_numel = 0, code_numel = 0;
    Bytes packed, gather_buffer, codes, code_buffer, reduce_send, reduce_out;
    Bytes scales;  // the float8 all-gather's scales of the group's coded weights
    bool gather_posted = false, materialized = false, reduce_posted = false;
  };

  Group& group(int id) { return groups_[static_cast<size_t>(index_of_id_.at(id))]; }

  // Deferred (pp > 1, step), the gradients accumulate over the step's micro-batches: made once;
  // reduced per microbatch, a split backward's norms may have added into them since.
  void make_gradients(MemoryTimeline& t, Group& g, const std::vector<std::string>& except) {
    MemoryTimeline::Tag tag(t, MemoryCategory::GatheredParameters);
    for (Param& p : g.params) {
      if (!p.layout.trained || p.grad.held() ||
          std::find(except.begin(), except.end(), p.layout.name) != except.end()) {
        continue;
      }
      p.grad = t.hold(d(p.layout.rows) * d(p.layout.cols) * kMasterBytes);
    }
  }

  void reduce_now(MemoryTimeline& t, Group& g) {
    if (reduce_in_flight_ >= 0) drain_reduce(groups_[static_cast<size_t>(reduce_in_flight_)]);
    drain_reduce(g);
    post_reduce(t, g);
    reduce_in_flight_ = static_cast<int>(&g - groups_.data());
  }

  // The packed gradients, the unsharded ones let go, the reduce-scatter's output.
  void post_reduce(MemoryTimeline& t, Group& g) {
    if (g.shard_numel == 0) return;  // every parameter frozen (FullyShardedDataParallel)
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
  bool defer_;  // pp > 1, step: gradients reduce-scattered once, in finish_gradients
  int64_t shards_ = 1;
  std::vector<Group> groups_;
  std::map<int, int> index_of_id_;
  int reduce_in_flight_ = -1;
  fp8::Float8AllGatherMemory codec_;
  Bytes all_scales_;  // every coded weight's scale, precomputed after each optimizer step
};

}  // namespace

std::unique_ptr<FsdpMemory> FsdpMemory::make(const ParallelLayout& layout,
                                             const ParallelMemoryOptions& options) {
  return std::make_unique<Fsdp>(layout, options);
}

}  // namespace titan::parallel
