#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "core/memory_tag.h"
#include "core/peer_work.h"
#include "core/profiler.h"
#include "parallel/comm/peer_channels.h"

namespace titan::parallel {

namespace {

using pipeline::Action;
using pipeline::ActionKind;
// The channels of the two kinds of message (PeerTransfer): each keeps its order between two
// ranks in every list, the two together do not.
constexpr int kActivations = kActivationChannel;
constexpr int kGradients = kGradientChannel;

}  // namespace

int timing_index(ActionKind kind) {
  switch (kind) {
    case ActionKind::FORWARD: return 0;
    case ActionKind::BACKWARD_FULL: return 1;
    case ActionKind::BACKWARD_INPUT: return 2;
    case ActionKind::BACKWARD_WEIGHT: return 3;
    default: TT_CHECK(false, "pipeline: no compute timing for ", pipeline::to_string({kind}));
  }
  return 0;
}

PipelineExecutor::PipelineExecutor(pipeline::PipelineSchedule schedule,
                                   std::vector<PipelineStage> stages, const DeviceMesh& mesh,
                                   PipelineShape shape)
    : schedule_(std::move(schedule)), pp_(mesh[MeshDim::Pp]), shape_(shape) {
  TT_CHECK(pp_.size() == schedule_.pp(), "PipelineExecutor: a schedule for pp ", schedule_.pp(),
           " on a mesh of pp ", pp_.size());
  const int64_t rank = pp_.rank();
  for (const PipelineStage& s : stages) {
    TT_CHECK(s.part != nullptr && schedule_.placement.rank_of(s.stage) == rank,
             "PipelineExecutor: stage ", s.stage, " is not pp rank ", rank, "'s");
    parts_[s.stage] = s.part;
  }
  // Under tp a W gathers its operands over tp again (model/weight_grad_queue.h). On CUDA the host
  // queues work ahead of the GPU, so a receive not done yet says nothing about whether the GPU
  // will have to wait for it.
  early_weight_grads_ = mesh.degree(MeshDim::Tp) == 1 && !shape_.device.is_cuda();
  for (const auto& [stage, part] : parts_) {
    early_weight_grads_ = early_weight_grads_ && !part->weight_gradients_collective();
  }
  TT_CHECK(parts_.size() == schedule_.placement.stages_of(rank).size(),
           "PipelineExecutor: pp rank ", rank, " holds ",
           schedule_.placement.stages_of(rank).size(), " stages, given ", parts_.size());
  TT_CHECK(shape_.microbatch_size > 0 && shape_.sequence_shards > 0 && shape_.dim > 0,
           "PipelineExecutor: microbatches of ", shape_.microbatch_size, " sequences in ",
           shape_.sequence_shards, " sequence shards of width ", shape_.dim);
}

model::Transformer& PipelineExecutor::part_of(int64_t stage) {
  const auto it = parts_.find(stage);
  TT_CHECK(it != parts_.end(), "pipeline: stage ", stage, " is not on this rank");
  return *it->second;
}

double PipelineExecutor::train(const Tensor& tokens, const Tensor& targets, double grad_scale,
                               const Tensor& doc_start) {
  const int64_t b = shape_.microbatch_size;
  TT_CHECK(tokens.ndim() == 2 && tokens.size(0) == schedule_.microbatches * b &&
               targets.shape() == tokens.shape(),
           "pipeline: a step takes tokens and targets [m·b, S] with m·b = ",
           schedule_.microbatches * b, ", got ", tokens, " and ", targets);
  const Microbatch mb{b, tokens.size(1), b * tokens.size(1) / shape_.sequence_shards};
  doc_start_ = doc_start;
  return run(schedule_.ranks[static_cast<size_t>(pp_.rank())], tokens, targets, mb, grad_scale,
             true);
}

double PipelineExecutor::evaluate(const Tensor& tokens, const Tensor& targets,
                                  int64_t microbatch_size, const Tensor& doc_start) {
  TT_CHECK(tokens.ndim() == 2 && microbatch_size > 0 && tokens.size(0) % microbatch_size == 0 &&
               targets.shape() == tokens.shape(),
           "pipeline: evaluation takes tokens and targets of whole microbatches of ",
           microbatch_size, " sequences, got ", tokens, " and ", targets);
  const int64_t n = tokens.size(0) / microbatch_size;
  if (n != forward_only_microbatches_) {
    forward_only_ = pipeline::forward_only_actions(schedule_.placement, n);
    forward_only_microbatches_ = n;
  }
  const Microbatch mb{microbatch_size, tokens.size(1),
                      microbatch_size * tokens.size(1) / shape_.sequence_shards};
  doc_start_ = doc_start;
  return run(forward_only_[static_cast<size_t>(pp_.rank())], tokens, targets, mb, 0.0, false);
}

Tensor PipelineExecutor::evaluate_tokens(const Tensor& tokens, const Tensor& targets,
                                        int64_t microbatch_size, const Tensor& doc_start) {
  bool head = false;
  for (const auto& [stage, part] : parts_) head = head || part->has_head();
  if (head) token_losses_ = Tensor::zeros({tokens.size(0), tokens.size(1)}, DType::F32);
  evaluate(tokens, targets, microbatch_size, doc_start);
  return std::exchange(token_losses_, Tensor());
}

double PipelineExecutor::run(const std::vector<Action>& actions, const Tensor& tokens,
                             const Tensor& targets, const Microbatch& mb, double grad_scale,
                             bool training) {
  profiler::Span span(training ? "pipeline" : "pipeline.evaluate", "pipeline");
  // From the first receive posted to the last send waited on, nothing synchronizes the device.
  const PeerWorkScope peer_work;
  mb_ = mb;
  const DeviceMoment start = DeviceMoment::now(shape_.device);
  timing_ = {};
  timed_computes_.clear();
  timed_waits_.clear();
  loss_sum_ = 0;
  posted_.assign(actions.size(), false);
  ran_early_.assign(actions.size(), false);
  for (size_t i = 0; i < actions.size();) {
    if (ran_early_[i]) {
      ++i;
      continue;
    }
    if (!actions[i].is_compute()) {
      size_t end = i;
      while (end < actions.size() && !actions[end].is_compute()) ++end;
      post(actions, i, end, /*receives_only=*/false);
      i = end;
      continue;
    }
    {
      // The receives the next compute needs sit between this compute and it.
      size_t end = i + 1;
      while (end < actions.size() && !actions[end].is_compute()) ++end;
      post(actions, i + 1, end, /*receives_only=*/true);
    }
    if (training && early_weight_grads_) {
      run_weight_grads_while_waiting(actions, i, tokens, targets, grad_scale);
    }
    compute(actions, i, tokens, targets, grad_scale, training);
    ++i;
  }
  {
    profiler::Span wait("pipeline.wait_sends", "pipeline");
    DeviceInterval& waited = timed_waits_.emplace_back();
    waited.start = DeviceMoment::now(shape_.device);
    for (Work& w : sends_) w.wait();
    waited.end = DeviceMoment::now(shape_.device);
  }
  sends_.clear();
  TT_CHECK(inputs_.empty() && output_grads_.empty() && outputs_.empty() && input_grads_.empty() &&
               held_.empty() && input_arrivals_.empty() && grad_arrivals_.empty(),
           "pipeline: the list of pp rank ", pp_.rank(), " left ", inputs_.size(), " inputs, ",
           output_grads_.size(), " gradients, ", outputs_.size() + input_grads_.size(),
           " unsent tensors and ", held_.size(), " microbatches' activations behind");
  read_timing(start);
  return loss_sum_;
}

void PipelineExecutor::read_timing(const DeviceMoment& start) {
  timing_.seconds = DeviceMoment::now(shape_.device).seconds_since(start);
  for (const DeviceInterval& wait : timed_waits_) timing_.wait_seconds += wait.seconds();
  for (const TimedCompute& c : timed_computes_) {
    // The compute's own time: the wait for its input is counted apart.
    const double waited = c.wait ? c.wait->seconds() : 0.0;
    const double seconds = c.span.seconds() - waited;
    const auto kind = static_cast<size_t>(timing_index(c.kind));
    timing_.wait_seconds += waited;
    timing_.compute_seconds[kind] += seconds;
    ++timing_.computes[kind];
    timing_.ran.push_back({static_cast<int64_t>(c.index), std::llround(1e6 * seconds)});
  }
  timed_computes_.clear();
  timed_waits_.clear();
}

void PipelineExecutor::post(const std::vector<Action>& actions, size_t begin, size_t end,
                            bool receives_only) {
  std::vector<PeerTransfer> transfers;
  std::vector<std::pair<Key, std::map<Key, Work>*>> arrivals;
  for (size_t i = begin; i < end; ++i) {
    const Action& a = actions[i];
    if (posted_[i] || (receives_only && !a.is_receive())) continue;
    posted_[i] = true;
    const Key key{a.stage, a.microbatch};
    const int peer = static_cast<int>(a.peer);
    switch (a.kind) {
      case ActionKind::SEND_ACT:
        transfers.push_back({PeerTransfer::Direction::Send, take_input(outputs_, key, "output"),
                             peer, kActivations});
        break;
      case ActionKind::SEND_GRAD:
        transfers.push_back({PeerTransfer::Direction::Send,
                             take_input(input_grads_, key, "input gradient"), peer, kGradients});
        break;
      case ActionKind::RECV_ACT:
      case ActionKind::RECV_GRAD: {
        const bool activation = a.kind == ActionKind::RECV_ACT;
        std::map<Key, Tensor>& into = activation ? inputs_ : output_grads_;
        TT_CHECK(!into.contains(key), "pipeline: stage ", a.stage, " microbatch ", a.microbatch,
                 " receives its ", activation ? "input" : "output gradient", " twice");
        // A boundary activation or its gradient: kept by the stage that reads it, so tagged as
        // activations.
        MemoryTagScope tag(MemoryTag::activations(-1));
        Tensor buffer = Tensor::empty({mb_.rows, shape_.dim}, shape_.dtype, shape_.device);
        into[key] = buffer;
        transfers.push_back(
            {PeerTransfer::Direction::Recv, buffer, peer, activation ? kActivations : kGradients});
        arrivals.emplace_back(key, activation ? &input_arrivals_ : &grad_arrivals_);
        break;
      }
      default: TT_CHECK(false, "pipeline: post() of a compute, ", pipeline::to_string(a));
    }
  }
  if (transfers.empty()) return;
  // Each receive is waited on alone, by the compute that reads it; the sends at the end of the
  // run. A receive that waited on its group's sends too would wait for the peer to post the
  // matching receives, which the peer's own list may put several computes later.
  std::vector<Work> works = pp_.comm().point_to_point_async(transfers);
  size_t next_arrival = 0;
  for (size_t t = 0; t < transfers.size(); ++t) {
    if (transfers[t].direction == PeerTransfer::Direction::Send) {
      sends_.push_back(std::move(works[t]));
    } else {
      auto& [key, into] = arrivals[next_arrival++];
      (*into)[key] = std::move(works[t]);
    }
  }
}

Work* PipelineExecutor::arrival_for(const Action& a) {
  const Key key{a.stage, a.microbatch};
  std::map<Key, Work>* arrivals = nullptr;
  if (a.kind == ActionKind::FORWARD) arrivals = &input_arrivals_;
  if (a.kind == ActionKind::BACKWARD_FULL || a.kind == ActionKind::BACKWARD_INPUT) {
    arrivals = &grad_arrivals_;
  }
  if (arrivals == nullptr) return nullptr;
  const auto it = arrivals->find(key);
  return it == arrivals->end() ? nullptr : &it->second;
}

void PipelineExecutor::run_weight_grads_while_waiting(const std::vector<Action>& actions, size_t i,
                                                      const Tensor& tokens, const Tensor& targets,
                                                      double grad_scale) {
  Work* arrival = arrival_for(actions[i]);
  if (arrival == nullptr) return;
  size_t j = i;
  while (!arrival->done()) {
    // The next W of the list not run yet; the computes passed over on the way (from actions[i]
    // on) must not write what it writes or make what it reads.
    for (;; ++j) {
      if (j == actions.size()) return;
      const Action& a = actions[j];
      if (a.kind == ActionKind::BACKWARD_WEIGHT && !ran_early_[j]) break;
      // A full backward adds its weight gradients at once: W must not pass it.
      if (a.kind == ActionKind::BACKWARD_FULL) return;
    }
    const Action& w = actions[j];
    for (size_t k = i; k < j; ++k) {
      // Its own I still ahead: the GEMMs it runs are not queued yet.
      if (actions[k].kind == ActionKind::BACKWARD_INPUT && actions[k].stage == w.stage &&
          actions[k].microbatch == w.microbatch) {
        return;
      }
    }
    compute(actions, j, tokens, targets, grad_scale, /*training=*/true);
    ran_early_[j] = true;
    ++timing_.weight_grads_run_early;
  }
}

Tensor PipelineExecutor::take_input(std::map<Key, Tensor>& from, const Key& key, const char* what) {
  const auto it = from.find(key);
  TT_CHECK(it != from.end(), "pipeline: no ", what, " of stage ", key.first, " microbatch ",
           key.second, " on pp rank ", pp_.rank(), "; the action list is out of order");
  Tensor t = std::move(it->second);
  from.erase(it);
  return t;
}

void PipelineExecutor::compute(const std::vector<Action>& actions, size_t index,
                               const Tensor& tokens, const Tensor& targets, double grad_scale,
                               bool training) {
  const Action& a = actions[index];
  model::Transformer& part = part_of(a.stage);
  const Key key{a.stage, a.microbatch};
  const int64_t b = mb_.size;
  if (before_compute_) before_compute_(a);
  TT_PROFILE_SPAN(pipeline::to_string(a), "pipeline");
  // Its moments (read_timing): from here to the end of this function, and the wait for its
  // input, which read_timing takes off. Computes do not nest, so the slot stays this one's.
  const size_t slot = timed_computes_.size();
  timed_computes_.push_back({index, a.kind, {DeviceMoment::now(shape_.device), {}}, {}});
  struct EndMoment {
    PipelineExecutor& executor;
    size_t slot;
    ~EndMoment() {
      executor.timed_computes_[slot].span.end = DeviceMoment::now(executor.shape_.device);
    }
  } end_moment{*this, slot};
  auto wait_for = [this, slot](std::map<Key, Work>& arrivals, const Key& k) {
    const auto it = arrivals.find(k);
    if (it == arrivals.end()) return;  // handed over on this rank
    profiler::Span span("pipeline.wait_recv", "pipeline");
    DeviceInterval waited;
    waited.start = DeviceMoment::now(shape_.device);
    it->second.wait();
    waited.end = DeviceMoment::now(shape_.device);
    timed_computes_[slot].wait = std::move(waited);
    arrivals.erase(it);
  };
  switch (a.kind) {
    case ActionKind::FORWARD: {
      Tensor input;
      if (part.has_embedding()) {
        input = tokens.narrow(0, a.microbatch * b, b).contiguous();
      } else {
        wait_for(input_arrivals_, key);
        input = take_input(inputs_, key, "input");
      }
      const Tensor mb_targets =
          part.has_head() ? targets.narrow(0, a.microbatch * b, b).contiguous() : Tensor();
      const Tensor mb_doc_start =
          doc_start_.defined() ? doc_start_.narrow(0, a.microbatch * b, b).contiguous() : Tensor();
      model::PartOutput out =
          part.forward_part(input, mb_targets, b, mb_.seq_len, grad_scale, training, mb_doc_start);
      // Training keeps what the backward needs; a forward-only pass drops it.
      model::PartActivations kept = part.take_activations();
      if (training) held_.emplace(key, std::move(kept));
      if (part.has_head()) {
        loss_sum_ += out.loss_sum;
        if (token_losses_.defined()) {
          // [b·S] of this microbatch into its rows of [n·b, S].
          const Tensor losses = part.take_token_losses();
          TT_CHECK(losses.dtype() == DType::F32 && losses.numel() == b * mb_.seq_len,
                   "pipeline: the head's token losses are ", losses, ", not f32 [b·S]");
          std::copy_n(losses.data<float>(), losses.numel(),
                      token_losses_.data<float>() + a.microbatch * losses.numel());
        }
      } else if (parts_.contains(a.stage + 1)) {
        inputs_[{a.stage + 1, a.microbatch}] = std::move(out.x);
      } else {
        outputs_[key] = std::move(out.x);
      }
      break;
    }
    case ActionKind::BACKWARD_FULL:
    case ActionKind::BACKWARD_INPUT: {
      Tensor dout;
      if (!part.has_head()) {
        wait_for(grad_arrivals_, key);
        dout = take_input(output_grads_, key, "output gradient");
      }
      const auto held = held_.find(key);
      TT_CHECK(held != held_.end(), "pipeline: ", pipeline::to_string(a), " before its forward");
      part.restore_activations(std::move(held->second));
      held_.erase(held);
      const bool split = a.kind == ActionKind::BACKWARD_INPUT;
      Tensor dx = part.backward_part(dout, split ? model::Transformer::WeightGrads::Deferred
                                                 : model::Transformer::WeightGrads::Now);
      // A split backward leaves its weight-gradient GEMMs (and what they read) for W.
      if (split) held_.emplace(key, part.take_activations());
      if (!part.has_embedding()) {
        if (parts_.contains(a.stage - 1)) {
          output_grads_[{a.stage - 1, a.microbatch}] = std::move(dx);
        } else {
          input_grads_[key] = std::move(dx);
        }
      }
      break;
    }
    case ActionKind::BACKWARD_WEIGHT: {
      const auto held = held_.find(key);
      TT_CHECK(held != held_.end(), "pipeline: ", pipeline::to_string(a), " before its I");
      part.restore_activations(std::move(held->second));
      held_.erase(held);
      part.backward_weights();
      break;
    }
    default: TT_CHECK(false, "pipeline: compute() of ", pipeline::to_string(a));
  }
}

}  // namespace titan::parallel
