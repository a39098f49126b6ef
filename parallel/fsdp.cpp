#include "parallel/fsdp.h"

#include <algorithm>
#include <optional>

#include "core/cast.h"
#include "core/check.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "model/ops/tensor_math.h"
#include "parallel/owned_rows.h"

namespace titan::parallel {

namespace {

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

Shape shard_shape(const Shape& local, int64_t shard_rows) {
  Shape shape = local;
  shape[0] = shard_rows;
  return shape;
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::vector<model::ParamGroup> groups,
                                                   const DeviceMesh& mesh,
                                                   bool reshard_after_forward, CodedGather coded,
                                                   ParamPlacement placement,
                                                   bool defer_gradient_reduction)
    : mesh_(mesh),
      reshard_after_forward_(reshard_after_forward),
      defer_gradient_reduction_(defer_gradient_reduction),
      coded_(std::move(coded)),
      placement_(placement) {
  const int64_t shards = mesh_[kDpShardCp].size();
  for (const model::ParamGroup& pg : groups) {
    Group g;
    g.name = pg.name;
    g.id = pg.id;
    g.read_by_head = pg.read_by_head;
    TT_CHECK(index_of_id_.emplace(pg.id, static_cast<int>(groups_.size())).second,
             "FSDP: two parameter groups with id ", pg.id);
    TT_CHECK(!pg.params.empty(), "FSDP: empty parameter group ", pg.name);
    // One dtype per group, so the group moves in one collective: the parameters' own (f32) for
    // the shards and gradients, the placement's compute dtype for the gather.
    g.dtype = pg.params.front()->dtype;
    g.compute_dtype = placement_.compute_dtype;
    for (model::Parameter* p : pg.params) {
      TT_CHECK(!p->allocated(), "FSDP: ", p->name, " already has storage");
      TT_CHECK(p->dtype == g.dtype, "FSDP: ", p->name, " is ", dtype_name(p->dtype), ", its group ",
               dtype_name(g.dtype));
      ShardedParam sp;
      sp.param = p;
      sp.local_shape = p->local_shape();
      sp.rows = sp.local_shape[0];
      sp.cols = sp.local_shape.ndim() == 2 ? sp.local_shape[1] : 1;
      sp.shard_rows = fsdp_shard_rows(sp.rows, shards);
      sp.offset = g.shard_numel;
      sp.shard.name = p->name;
      sp.shard.shape = p->shape;
      sp.shard.dtype = p->dtype;
      sp.shard.parts = p->parts;
      sp.shard.slice = p->slice;
      sp.shard.tied_to = p->tied_to;
      sp.shard.frozen = p->frozen;
      sp.shard.adapter = p->adapter;
      const Shape shape = shard_shape(sp.local_shape, sp.shard_rows);
      {
        MemoryTagScope tag(MemoryCategory::Parameters);
        sp.shard.value = Tensor::zeros(shape, p->dtype, placement_.device);
      }
      // A frozen weight is gathered for compute and never reduced: no gradient, no place in
      // the reduce-scatter.
      if (p->trained()) {
        MemoryTagScope tag(MemoryCategory::Gradients);
        sp.shard.grad = Tensor::zeros(shape, p->dtype, placement_.device);
        g.shard_numel += sp.shard_rows * sp.cols;
      }
      sp.coded = coded_.codec != nullptr &&
                 std::find(coded_.params.begin(), coded_.params.end(), p) != coded_.params.end();
      int64_t& gathered = sp.coded ? g.code_numel : g.value_numel;
      sp.gather_offset = gathered;
      gathered += sp.shard_rows * sp.cols;
      g.params.push_back(std::move(sp));
    }
    groups_.push_back(std::move(g));
  }
}

void FullyShardedDataParallel::init_weights(uint64_t seed) {
  const int64_t s = mesh_[kDpShardCp].rank();
  for (Group& g : groups_) {
    for (ShardedParam& sp : g.params) {
      // Rows past the end of the slice are padding: they stay zero, and so do their gradients
      // and AdamW updates.
      const RowRange owned = fsdp_shard_range(sp.rows, mesh_[kDpShardCp].size(), s);
      sp.shard.value.zero_();
      if (owned.count > 0) {
        model::init_local_rows(flat(sp.shard.value).narrow(0, 0, owned.count * sp.cols), *sp.param,
                               owned.begin, seed);
      }
    }
  }
}

std::vector<model::Parameter*> FullyShardedDataParallel::optimizer_params() {
  std::vector<model::Parameter*> shards;
  for (Group& g : groups_) {
    for (ShardedParam& sp : g.params) shards.push_back(&sp.shard);
  }
  return shards;
}

void FullyShardedDataParallel::zero_grad() {
  for (Group& g : groups_) {
    drain_reduce(g);
    for (ShardedParam& sp : g.params) {
      if (sp.shard.trained()) sp.shard.grad.zero_();
    }
  }
}

void FullyShardedDataParallel::update_codec(const std::vector<ShardedParam*>& params) {
  if (params.empty()) return;
  std::vector<model::ParamGatherCodec::Shard> shards;
  for (ShardedParam* sp : params) shards.push_back({sp->param, sp->shard.value});
  coded_.codec->update(shards);
}

void FullyShardedDataParallel::on_weights_updated() {
  if (!coded_.codec || !coded_.update_after_step) return;
  std::vector<ShardedParam*> all;
  for (Group& g : groups_) {
    for (ShardedParam& sp : g.params) {
      if (sp.coded) all.push_back(&sp);
    }
  }
  update_codec(all);
}

void FullyShardedDataParallel::post_gather(Group& g) {
  if (g.gather_posted || g.materialized) return;
  TT_PROFILE_SPAN("fsdp.all_gather." + g.name, "fsdp");
  const int64_t shards = mesh_[kDpShardCp].size();
  // The shards packed (and cast to the compute dtype) for the collective: its send buffer.
  std::optional<MemoryTagScope> tag(std::in_place, MemoryCategory::CommBuffers);
  Tensor packed = Tensor::empty({g.value_numel}, g.compute_dtype, placement_.device);
  for (ShardedParam& sp : g.params) {
    if (sp.coded) continue;
    cast_into(packed.narrow(0, sp.gather_offset, sp.shard.value.numel()), flat(sp.shard.value));
  }
  tag.emplace(MemoryCategory::GatheredParameters);
  g.gather_buffer = Tensor::empty({shards * g.value_numel}, g.compute_dtype, placement_.device);
  g.gather = mesh_[kDpShardCp].comm().all_gather_async(g.gather_buffer, packed);
  track_unsharded(static_cast<int64_t>(g.gather_buffer.nbytes()));
  gathered_bytes_ += static_cast<int64_t>(g.gather_buffer.nbytes());
  if (g.code_numel > 0) {
    if (!coded_.update_after_step) {
      std::vector<ShardedParam*> coded;
      for (ShardedParam& sp : g.params) {
        if (sp.coded) coded.push_back(&sp);
      }
      update_codec(coded);
    }
    const DType wire = coded_.codec->wire_dtype();
    tag.emplace(MemoryCategory::CommBuffers);
    Tensor codes = Tensor::empty({g.code_numel}, wire, placement_.device);
    for (ShardedParam& sp : g.params) {
      if (!sp.coded) continue;
      coded_.codec->encode(*sp.param, sp.shard.value,
                           codes.narrow(0, sp.gather_offset, sp.shard.value.numel()));
    }
    tag.emplace(MemoryCategory::GatheredParameters);
    g.code_buffer = Tensor::empty({shards * g.code_numel}, wire, placement_.device);
    g.code_gather = mesh_[kDpShardCp].comm().all_gather_async(g.code_buffer, codes);
    track_unsharded(static_cast<int64_t>(g.code_buffer.nbytes()));
    gathered_bytes_ += static_cast<int64_t>(g.code_buffer.nbytes());
  }
  g.gather_posted = true;
}

void FullyShardedDataParallel::materialize(Group& g) {
  if (g.materialized) return;
  post_gather(g);
  TT_PROFILE_SPAN("fsdp.unshard." + g.name, "fsdp");
  g.gather.wait();
  g.code_gather.wait();
  const int64_t shards = mesh_[kDpShardCp].size();
  for (ShardedParam& sp : g.params) {
    // [shards · R, cols], of which the first `rows` are the slice.
    const int64_t n = sp.shard_rows * sp.cols;
    const Tensor& buffer = sp.coded ? g.code_buffer : g.gather_buffer;
    const int64_t stride = sp.coded ? g.code_numel : g.value_numel;
    // A codec may keep the gathered codes until the value is released (FP8: the linear's GEMMs
    // compute from them).
    MemoryTagScope tag(sp.coded ? MemoryCategory::Fp8Cache : MemoryCategory::GatheredParameters);
    Tensor full = Tensor::empty({shards * n}, buffer.dtype(), buffer.device());
    for (int64_t r = 0; r < shards; ++r) {
      full.narrow(0, r * n, n).copy_from(buffer.narrow(0, r * stride + sp.gather_offset, n));
    }
    Tensor slice = full.narrow(0, 0, sp.rows * sp.cols).view({sp.rows, sp.cols});
    if (sp.coded) {
      sp.param->value =
          coded_.codec->decode(*sp.param, slice, g.compute_dtype).view(sp.local_shape);
      track_unsharded(static_cast<int64_t>(full.nbytes() + sp.param->value.nbytes()));
    } else {
      sp.param->value = slice.view(sp.local_shape);
      track_unsharded(static_cast<int64_t>(full.nbytes()));
    }
  }
  track_unsharded(-static_cast<int64_t>(g.gather_buffer.nbytes()));
  g.gather_buffer = {};
  if (g.code_buffer.defined()) {
    track_unsharded(-static_cast<int64_t>(g.code_buffer.nbytes()));
    g.code_buffer = {};
  }
  g.gather_posted = false;
  g.materialized = true;
}

void FullyShardedDataParallel::release_values(Group& g) {
  if (!g.materialized) return;
  for (ShardedParam& sp : g.params) {
    const int64_t gathered = mesh_[kDpShardCp].size() * sp.shard_rows * sp.cols;
    if (sp.coded) {
      coded_.codec->release(*sp.param, sp.param->value);
      track_unsharded(-static_cast<int64_t>(gathered * dtype_size(coded_.codec->wire_dtype()) +
                                            sp.param->value.nbytes()));
    } else {
      track_unsharded(-static_cast<int64_t>(gathered * dtype_size(g.compute_dtype)));
    }
    sp.param->value = {};
  }
  g.materialized = false;
}

int FullyShardedDataParallel::index_of(int id) const {
  const auto it = index_of_id_.find(id);
  TT_CHECK(it != index_of_id_.end(), "FSDP: no parameter group ", id, " on this rank");
  return it->second;
}

FullyShardedDataParallel::Group& FullyShardedDataParallel::group(int id) {
  return groups_[static_cast<size_t>(index_of(id))];
}

void FullyShardedDataParallel::before_forward(int id) {
  materialize(group(id));
  // The groups that run next in forward: the next ids, while this rank holds them.
  for (int next = id + 1; next <= id + kFsdpPrefetchGroups; ++next) {
    if (!index_of_id_.contains(next)) break;
    post_gather(group(next));
  }
}

void FullyShardedDataParallel::after_forward(int id) {
  Group& g = group(id);
  const bool head = g.name == model::kHeadGroupName;
  // The tied embedding stays gathered for the head that reads it again (model::ParamGroup).
  if (reshard_after_forward_ && !head && !g.read_by_head) release_values(g);
}

void FullyShardedDataParallel::before_backward(int id) { before_backward_input(id, {}); }

void FullyShardedDataParallel::before_backward_input(
    int id, const std::vector<model::Parameter*>& deferred) {
  Group& g = group(id);
  materialize(g);
  for (int next = id - 1; next >= id - kFsdpPrefetchGroups; --next) {
    if (!index_of_id_.contains(next)) break;
    post_gather(group(next));
  }
  // Reduced per microbatch, the deferred weights' gradients are made in W, not now.
  make_gradients(g, defer_gradient_reduction_ ? std::vector<model::Parameter*>{} : deferred);
}

void FullyShardedDataParallel::make_gradients(Group& g,
                                              const std::vector<model::Parameter*>& except) {
  // The unsharded gradients live only until the reduce-scatter: gathered, not the rank's own.
  // Deferred, they accumulate over the step's micro-batches and are made once; reduced per
  // microbatch, a split backward's norms may have added into them since the last reduction.
  MemoryTagScope tag(MemoryCategory::GatheredParameters);
  for (ShardedParam& sp : g.params) {
    if (sp.param->grad.defined() || sp.param->frozen) continue;
    if (std::find(except.begin(), except.end(), sp.param) != except.end()) continue;
    sp.param->grad = Tensor::zeros(sp.local_shape, sp.param->dtype, placement_.device);
    track_unsharded(static_cast<int64_t>(sp.param->grad.nbytes()));
  }
}

void FullyShardedDataParallel::after_backward(int id) {
  Group& g = group(id);
  if (defer_gradient_reduction_) {
    // The gradients wait for finish_gradients(); only the gathered values go.
    release_values(g);
    return;
  }
  release_values(g);  // before packing the gradients: the peak is then one group's grads twice
  reduce_now(g);
}

void FullyShardedDataParallel::reduce_now(Group& g) {
  // At most one reduce-scatter in flight besides this group's: the previous group's has had
  // this group's whole backward to complete in. Waiting later would keep every group's
  // gradient buffer alive at once — the whole unsharded model's gradients.
  if (reduce_in_flight_ >= 0) drain_reduce(groups_[reduce_in_flight_]);
  drain_reduce(g);  // the previous micro-batch's, if still in flight
  post_reduce(g);
  reduce_in_flight_ = index_of(g.id);
}

void FullyShardedDataParallel::after_backward_input(
    int id, const std::vector<model::Parameter*>& deferred) {
  Group& g = group(id);
  release_values(g);
  // Reduced per microbatch, the deferred weights have no gradient until W makes it
  // (before_backward_input), so the microbatches between their I and their W hold none.
  if (defer_gradient_reduction_) return;
  for (ShardedParam& sp : g.params) {
    TT_CHECK(!sp.param->grad.defined() ||
                 std::find(deferred.begin(), deferred.end(), sp.param) == deferred.end(),
             "FSDP: ", sp.param->name, " has a gradient before its W");
  }
}

void FullyShardedDataParallel::before_weight_gradients(int id) { make_gradients(group(id), {}); }

void FullyShardedDataParallel::after_weight_gradients(int id) {
  if (!defer_gradient_reduction_) reduce_now(group(id));
}

void FullyShardedDataParallel::post_reduce(Group& g) {
  TT_PROFILE_SPAN("fsdp.reduce_scatter." + g.name, "fsdp");
  const int64_t shards = mesh_[kDpShardCp].size();
  if (mesh_.degree(MeshDim::Tp) > 1) {
    // Sequence-parallel norms: each tp rank's gradient covers only its tokens.
    for (ShardedParam& sp : g.params) {
      if (sp.param->trained() && sp.param->tp_replicated())
        mesh_[MeshDim::Tp].comm().all_reduce(sp.param->grad, ReduceOp::Sum);
    }
  }
  if (g.shard_numel == 0) return;  // every parameter of the group frozen: nothing to reduce
  // Pack rank-major: segment r holds, for each parameter, gradient rows [r·R, (r+1)·R).
  // Still the unsharded gradients, packed; the reduce-scatter's output is its receive buffer.
  std::optional<MemoryTagScope> tag(std::in_place, MemoryCategory::GatheredParameters);
  g.reduce_send = Tensor::zeros({shards * g.shard_numel}, g.dtype, placement_.device);
  track_unsharded(static_cast<int64_t>(g.reduce_send.nbytes()));
  for (ShardedParam& sp : g.params) {
    if (sp.param->frozen) continue;
    Tensor grad = flat(sp.param->grad);
    for (int64_t r = 0; r < shards; ++r) {
      const RowRange rows = fsdp_shard_range(sp.rows, shards, r);
      if (rows.count == 0) continue;
      g.reduce_send.narrow(0, r * g.shard_numel + sp.offset, rows.count * sp.cols)
          .copy_from(grad.narrow(0, rows.begin * sp.cols, rows.count * sp.cols));
    }
    track_unsharded(-static_cast<int64_t>(sp.param->grad.nbytes()));
    sp.param->grad = {};
  }
  tag.emplace(MemoryCategory::CommBuffers);
  g.reduce_out = Tensor::empty({g.shard_numel}, g.dtype, placement_.device);
  g.reduce =
      mesh_[kDpShardCp].comm().reduce_scatter_async(g.reduce_out, g.reduce_send, ReduceOp::Sum);
  g.reduce_posted = true;
}

void FullyShardedDataParallel::drain_reduce(Group& g) {
  if (!g.reduce_posted) return;
  TT_PROFILE_SPAN("fsdp.reduce_scatter_wait." + g.name, "fsdp");
  g.reduce.wait();
  for (ShardedParam& sp : g.params) {
    if (sp.shard.frozen) continue;
    model::accumulate(flat(sp.shard.grad),
                      g.reduce_out.narrow(0, sp.offset, sp.shard.grad.numel()));
  }
  track_unsharded(-static_cast<int64_t>(g.reduce_send.nbytes()));
  g.reduce_send = {};
  g.reduce_out = {};
  g.reduce_posted = false;
}

void FullyShardedDataParallel::finish_gradients() {
  profiler::Span span("fsdp.finish_gradients", "fsdp");
  if (defer_gradient_reduction_) {
    // Every group once, in backward order, one reduce-scatter in flight besides the one posted
    // (as after_backward): the accumulated gradients of the step's micro-batches.
    Group* in_flight = nullptr;
    for (auto g = groups_.rbegin(); g != groups_.rend(); ++g) {
      const bool has_gradients = std::any_of(g->params.begin(), g->params.end(),
                                             [](const ShardedParam& sp) {
                                               return sp.param->grad.defined();
                                             });
      if (has_gradients) {
        if (in_flight != nullptr) drain_reduce(*in_flight);
        post_reduce(*g);
        in_flight = &*g;
      }
    }
  }
  for (Group& g : groups_) drain_reduce(g);
  reduce_in_flight_ = -1;
  if (mesh_.degree(MeshDim::DpReplicate) == 1) return;
  // HSDP: the replicas hold the same shards; sum their gradients.
  std::vector<Work> pending;
  for (Group& g : groups_) {
    for (ShardedParam& sp : g.params) {
      if (sp.shard.frozen) continue;
      pending.push_back(
          mesh_[MeshDim::DpReplicate].comm().all_reduce_async(sp.shard.grad, ReduceOp::Sum));
    }
  }
  for (Work& w : pending) w.wait();
}

void FullyShardedDataParallel::track_unsharded(int64_t delta) {
  unsharded_bytes_ += delta;
  peak_unsharded_bytes_ = std::max(peak_unsharded_bytes_, unsharded_bytes_);
}

ParamMemory FullyShardedDataParallel::memory() const {
  ParamMemory m;
  for (const Group& g : groups_) {
    for (const ShardedParam& sp : g.params) {
      m.param_bytes += static_cast<int64_t>(sp.shard.value.nbytes());
      if (sp.shard.grad.defined()) m.grad_bytes += static_cast<int64_t>(sp.shard.grad.nbytes());
    }
  }
  m.peak_unsharded_bytes = peak_unsharded_bytes_;
  m.gathered_bytes = gathered_bytes_;
  return m;
}

std::string FullyShardedDataParallel::describe() const {
  return detail::concat(mesh_.degree(MeshDim::DpReplicate) > 1 ? "HSDP" : "FSDP", " over ",
                        mesh_[kDpShardCp].size(), " shards",
                        mesh_.degree(MeshDim::Cp) > 1 ? " (dp_shard × cp)" : "",
                        reshard_after_forward_ ? ", resharded after forward" : "");
}

}  // namespace titan::parallel
