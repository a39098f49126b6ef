#include "parallel/replicated.h"

#include "core/cast.h"
#include "core/memory_tag.h"
#include "core/profiler.h"

namespace titan::parallel {

ReplicatedDataParallel::ReplicatedDataParallel(std::vector<model::Parameter*> params,
                                               const DeviceMesh& mesh, ParamPlacement placement)
    : params_(std::move(params)), mesh_(mesh) {
  for (model::Parameter* p : params_) {
    if (!p->allocated()) model::allocate_parameter(*p, placement.device);
    if (p->dtype == placement.compute_dtype) continue;
    model::Parameter master = *p;  // the fp32 value and the gradient storage, shared
    MemoryTagScope tag(MemoryCategory::Parameters);  // the compute-dtype (bf16) working copy
    p->value = Tensor::empty(p->value.shape(), placement.compute_dtype, placement.device);
    masters_.push_back(std::move(master));
  }
  TT_CHECK(masters_.empty() || masters_.size() == params_.size(),
           "replicated mixed precision: every parameter or none gets a master copy");
}

std::vector<model::Parameter*> ReplicatedDataParallel::optimizer_params() {
  if (masters_.empty()) return params_;
  std::vector<model::Parameter*> masters;
  for (model::Parameter& m : masters_) masters.push_back(&m);
  return masters;
}

void ReplicatedDataParallel::init_weights(uint64_t seed) {
  for (model::Parameter* p : optimizer_params()) model::init_parameter(*p, seed);
  on_weights_updated();
}

void ReplicatedDataParallel::on_weights_updated() {
  for (size_t i = 0; i < masters_.size(); ++i) cast_into(params_[i]->value, masters_[i].value);
}

void ReplicatedDataParallel::zero_grad() {
  for (model::Parameter* p : params_) {
    if (p->trained()) p->grad.zero_();
  }
}

void ReplicatedDataParallel::finish_gradients() {
  const bool tp = mesh_.degree(MeshDim::Tp) > 1;
  const bool replicas = mesh_.degree(MeshDim::DpReplicate) > 1;
  if (!tp && !replicas) return;
  profiler::Span span("ddp.all_reduce", "ddp");
  // Post every reduction, then wait: the sums overlap each other.
  std::vector<Work> pending;
  for (model::Parameter* p : params_) {
    if (p->frozen) continue;
    const bool tp_partial = tp && p->tp_replicated();
    if (tp_partial) {
      pending.push_back(mesh_.slice({MeshDim::DpReplicate, MeshDim::Tp})
                            .comm()
                            .all_reduce_async(p->grad, ReduceOp::Sum));
    } else if (replicas) {
      pending.push_back(
          mesh_[MeshDim::DpReplicate].comm().all_reduce_async(p->grad, ReduceOp::Sum));
    }
  }
  for (Work& w : pending) w.wait();
}

ParamMemory ReplicatedDataParallel::memory() const {
  ParamMemory m;
  for (const model::Parameter* p : params_) {
    m.param_bytes += static_cast<int64_t>(p->value.nbytes());
    if (p->grad.defined()) m.grad_bytes += static_cast<int64_t>(p->grad.nbytes());
  }
  for (const model::Parameter& master : masters_) {
    m.param_bytes += static_cast<int64_t>(master.value.nbytes());
  }
  return m;
}

std::string ReplicatedDataParallel::describe() const {
  if (mesh_.degree(MeshDim::DpReplicate) > 1) return "DDP over dp_replicate";
  return mesh_.degree(MeshDim::Tp) > 1 ? "no data parallelism" : "a single rank";
}

}  // namespace titan::parallel
