// Runs one rank's action list of a pipeline schedule (parallel/pipeline/schedule.h) on the model
// parts of the stages it holds: the one executor for every schedule
// (docs/architecture.md#decision-17). The schedule decides the order; this file only does what
// each action says.
//
//   FORWARD s m          stage s's part on microbatch m: tokens for stage 0, else the x [T, D]
//                        the previous stage produced (received, or handed over on this rank)
//   BACKWARD_FULL s m    its backward: the gradient of its output x (received, handed over, or —
//                        on the last stage — its loss) back to the gradient of its input
//   BACKWARD_INPUT s m   the same, the weight-gradient GEMMs queued (model/weight_grad_queue.h)
//   BACKWARD_WEIGHT s m  those GEMMs
//   SEND_* / RECV_*      the activations and their gradients between stages on other ranks,
//                        over the pp group, each tp rank with its tp peer (the residual stream
//                        between blocks is sequence-sharded over tp: [T/tp, D] per rank)
//
// Each microbatch's activations are taken out of its part after the forward and put back before
// its backward (Transformer::take_activations), so a stage holds as many microbatches as the
// schedule keeps in flight and no more.
//
// Messages: activations travel on one channel and gradients on another (PeerTransfer), because
// between two ranks the lists keep the order of each kind but not of both together (the
// zero-bubble lists send an activation before a gradient that the receiver takes first;
// pipeline::message_order_fault shows where). A send is posted where the list has it; a
// compute's receives are posted when the compute before it starts, so the transfer overlaps that
// compute; a receive is waited on only by the compute that reads it, and the sends only at the end
// of the list. The time spent waiting is the rank's pipeline wait. The tensors stay on the
// rank's device: over MPI each channel is a tag (CUDA tensors staged through the host by the MPI
// communicator, as every one of its operations is); over NCCL each kind in each direction
// between neighbouring pp ranks is a two-rank communicator on a stream of its own
// (parallel/comm/peer_channels.h), so a message neither matches another kind's nor queues
// behind FSDP's or TP's collectives, and waiting on a receive is the compute stream waiting for
// it (docs/architecture.md#departs-17).
//
// One liberty with the order. A compute whose input has not arrived does not wait while a W is
// ready: the next W of the list whose I has run, with no full backward between, runs first, then
// the next, until the input is there. Without tp and without FSDP reducing per microbatch a W
// sends nothing and joins no collective (its I prepared its operands, collectives included:
// model/weight_grad_queue.h), so running it early cannot deadlock a list the simulator proved; the
// Ws keep their order among themselves and pass no full backward, so every gradient sums in the
// list's order and a run is bit for bit the same whatever its timing. The zero-bubble lists leave
// no idle time to absorb a late message (on a CPU an action's cost varies by ±20% from one
// microbatch to the next); their Ws are that slack. It frees activations sooner, never later. When
// a W joins a collective — under tp it gathers its operands again (model/weight_grad_queue.h), and
// FSDP reducing each microbatch's gradients (parallel/pipeline_gradient_reduction.h)
// reduce-scatters a group after its W — the ranks of that collective could run it at different
// places, so then every W runs where the list has it. Nor on CUDA: there the host queues work
// ahead of the GPU, so a receive the host finds unfinished says nothing of whether the GPU will
// wait for it, and the Ws would move with the host's lead instead of the messages.
//
// Timing. Each compute and each wait is timed between two DeviceMoments on the rank's device:
// the host clock on the CPU, events on the stream on CUDA, where the host only queues a compute
// and its clock would read the launches. The moments are read when the list has run (on CUDA
// reading one waits for the stream, which the run must not do between its computes), so the
// figures are the GPU's: a compute's time on the stream, a wait's the time the stream stood
// idle until the receive had arrived (over NCCL the stream waits for it; over MPI the host is
// blocked on it).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/device_moment.h"
#include "core/tensor.h"
#include "model/transformer.h"
#include "parallel/device_mesh.h"
#include "parallel/pipeline/run_replay.h"
#include "parallel/pipeline/schedule.h"

namespace titan::parallel {

// A stage this rank holds: its index in the pipeline (0 … pp·v − 1) and its part of the model.
struct PipelineStage {
  int64_t stage = 0;
  model::Transformer* part = nullptr;
};

// What travels between stages: microbatches of `microbatch_size` sequences of S tokens (S is
// the batch's), whose residual stream is [b·S / sequence_shards, D] on each rank — the tp ranks
// hold sequence shards — in the compute dtype on the rank's device.
struct PipelineShape {
  int64_t microbatch_size = 1;
  int64_t sequence_shards = 1;
  int64_t dim = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();
};

// One run of a list on this rank.
struct PipelineTiming {
  double seconds = 0;       // the whole list, on the device (see PipelineExecutor: Timing)
  double wait_seconds = 0;  // blocked on a receive a compute needed, or on the sends at the end
  // By compute kind (F, B, I, W): seconds spent in the computes of that kind, waits excluded,
  // and how many ran. What a simulation with measured costs needs.
  std::array<double, 4> compute_seconds{};
  std::array<int64_t, 4> computes{};
  // W actions run ahead of their place, while a receive had not arrived (see PipelineExecutor).
  int64_t weight_grads_run_early = 0;
  // This run's computes in the order they ran, each with its time in microseconds, waits
  // excluded: what pipeline::replay_run takes. One run's alone: += leaves it.
  std::vector<pipeline::RanCompute> ran;

  // Adds another list's figures (not `ran`): a window's or a run's from its steps'.
  PipelineTiming& operator+=(const PipelineTiming& other) {
    seconds += other.seconds;
    wait_seconds += other.wait_seconds;
    for (size_t k = 0; k < computes.size(); ++k) {
      compute_seconds[k] += other.compute_seconds[k];
      computes[k] += other.computes[k];
    }
    weight_grads_run_early += other.weight_grads_run_early;
    return *this;
  }
};
// The index of a compute kind in PipelineTiming's arrays: F 0, B 1, I 2, W 3.
int timing_index(pipeline::ActionKind kind);

class PipelineExecutor {
 public:
  // `schedule` is the whole pipeline's (this rank runs its own list, at its pp coordinate);
  // `stages` are the stages this rank holds, in any order.
  PipelineExecutor(pipeline::PipelineSchedule schedule, std::vector<PipelineStage> stages,
                   const DeviceMesh& mesh, PipelineShape shape);

  // One batch through the schedule's m microbatches: tokens and targets [m·b, S] (b the
  // microbatch size), read by the first and the last stage. Each token's loss gradient is
  // scaled by grad_scale, and the parameters' gradients accumulate. Returns the loss sum of the
  // microbatches whose last stage is on this rank (0 elsewhere). doc_start [m·b, S] i32: the
  // tokens' document starts under block_causal (model/transformer.h), handed to every stage
  // with its microbatch's rows, as the first stage is handed its tokens; undefined: causal.
  double train(const Tensor& tokens, const Tensor& targets, double grad_scale,
               const Tensor& doc_start = {});
  // Forward only, in microbatches of `microbatch_size` sequences (any number n of them): tokens,
  // targets [n·microbatch_size, S]. Returns the loss sum as train() does, and touches no
  // gradient.
  double evaluate(const Tensor& tokens, const Tensor& targets, int64_t microbatch_size,
                  const Tensor& doc_start = {});
  // The same pass, each token's loss kept: [n·microbatch_size, S] on the host (f32) on the
  // rank whose stage holds the head, undefined on the others. Multiple-choice scoring sums a
  // continuation's columns of it.
  Tensor evaluate_tokens(const Tensor& tokens, const Tensor& targets, int64_t microbatch_size,
                         const Tensor& doc_start = {});

  const PipelineTiming& last_timing() const { return timing_; }
  // Called before each compute this rank runs, with its action: for tests that make a rank slow
  // at chosen actions.
  void set_before_compute(std::function<void(const pipeline::Action&)> hook) {
    before_compute_ = std::move(hook);
  }
  const pipeline::PipelineSchedule& schedule() const { return schedule_; }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (stage, microbatch)

  // One run's microbatch: sequences per microbatch, tokens per sequence, rows per rank.
  struct Microbatch {
    int64_t size = 0, seq_len = 0, rows = 0;
  };
  double run(const std::vector<pipeline::Action>& actions, const Tensor& tokens,
             const Tensor& targets, const Microbatch& mb, double grad_scale, bool training);
  // actions[index] of the running list.
  void compute(const std::vector<pipeline::Action>& actions, size_t index, const Tensor& tokens,
               const Tensor& targets, double grad_scale, bool training);
  // The receive actions[i] will wait on, if it is still in flight (null: none, or handed over
  // on this rank).
  Work* arrival_for(const pipeline::Action& action);
  // While actions[i]'s input has not arrived, runs the weight-gradient actions (W) that come
  // next in the list, in the list's order, as long as each one's I has run and no full backward
  // lies between: see the file comment.
  void run_weight_grads_while_waiting(const std::vector<pipeline::Action>& actions, size_t i,
                                      const Tensor& tokens, const Tensor& targets,
                                      double grad_scale);
  // Posts the sends and receives among actions[begin, end) not posted yet, as one group.
  void post(const std::vector<pipeline::Action>& actions, size_t begin, size_t end,
            bool receives_only);
  Tensor take_input(std::map<Key, Tensor>& from, const Key& key, const char* what);
  // Reads the run's moments into timing_ (on CUDA: waits for the stream to pass them).
  void read_timing(const DeviceMoment& start);
  model::Transformer& part_of(int64_t stage);

  pipeline::PipelineSchedule schedule_;
  std::map<int64_t, model::Transformer*> parts_;  // by stage
  DeviceMesh pp_;
  PipelineShape shape_;
  bool
      early_weight_grads_;  // a W may run in place of a late receive (CPU; no W joins a collective)
  std::vector<std::vector<pipeline::Action>> forward_only_;  // by rank, for evaluate()
  int64_t forward_only_microbatches_ = -1;
  Microbatch mb_;     // the running list's
  Tensor doc_start_;  // the running list's document starts [m·b, S] (block_causal), else undefined

  // One run's state: what arrived or was handed over, what waits to be sent, what each
  // microbatch's forward kept.
  std::vector<bool> posted_;
  std::vector<bool> ran_early_;         // W actions run before their place in the list
  std::map<Key, Tensor> inputs_;        // by the stage that reads it: x for FORWARD
  std::map<Key, Tensor> output_grads_;  // by the stage that reads it: dx_out for a backward
  std::map<Key, Work> input_arrivals_, grad_arrivals_;
  std::map<Key, Tensor> outputs_;      // by the stage that made it: waiting for SEND_ACT
  std::map<Key, Tensor> input_grads_;  // by the stage that made it: waiting for SEND_GRAD
  std::map<Key, model::PartActivations> held_;
  std::vector<Work> sends_;
  double loss_sum_ = 0;
  // evaluate_tokens(): the head's token losses [n·b, S], filled microbatch by microbatch.
  Tensor token_losses_;
  PipelineTiming timing_;
  // The run's moments, read when it ends (read_timing): each compute in the order it ran, with
  // the wait for its input when it had one, and the waits outside any compute.
  struct TimedCompute {
    size_t index = 0;  // in the running list
    pipeline::ActionKind kind{};
    DeviceInterval span;
    std::optional<DeviceInterval> wait;
  };
  std::vector<TimedCompute> timed_computes_;
  std::vector<DeviceInterval> timed_waits_;
  std::function<void(const pipeline::Action&)> before_compute_;
};

}  // namespace titan::parallel
