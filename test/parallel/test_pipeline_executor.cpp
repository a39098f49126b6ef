// The pipeline executor on every rank of an mpirun job (pp = the world): every schedule's
// gradients and loss equal the whole model's, run in one process on the same microbatches
// (gradient accumulation), to 1e-5 — for each parameter of each stage this rank holds — and
// the forward-only lists give the same loss; and a run whose Ws ran early, in place of late
// receives, has the gradients of a run that did not, bit for bit, and records an order the
// replay takes (pipeline::as_run). Under block_causal every stage gets its microbatch's document
// starts and the pipeline still has the whole model's gradients and loss. Under FSDP (pp ×
// dp_shard 2, on 4 ranks) each gradient reduction (parallel/pipeline_gradient_reduction.h)
// gives every shard its rows of the whole model's gradient over both dp ranks' batches, to
// 1e-5. The stage parts are initialised from the same seed as the whole model
// (docs/architecture.md#decision-6), so they start from the same weights.
//
// Run by ctest as `mpirun -np 2` and `-np 4` (test/CMakeLists.txt). A small model with
// grouped-query attention and 6 layers, so that pp 4 with two stages per rank still gives each
// stage a layer or the embedding or the head.
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/transformer.h"
#include "parallel/comm/collective_recorder.h"
#include "parallel/device_mesh.h"
#include "parallel/owned_rows.h"
#include "parallel/parallel_dims.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline/run_replay.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/pipeline_executor.h"
#include "support/mpi_world.h"
#include "support/small_model.h"

namespace titan::parallel {
namespace {

using testing::world_rank;

namespace pp = pipeline;

constexpr uint64_t kSeed = 7;
constexpr int64_t kSeqLen = 16;
constexpr int64_t kMicrobatchSize = 2;

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

model::ModelArgs args() {
  testing::SmallModelDims dims;
  dims.n_layers = 6;
  return testing::small_model_args(dims);
}

// [rows, S] tokens below the vocabulary, the same on every rank; `offset` draws other rows
// (another dp rank's batch).
Tensor random_stage_tokens(int64_t rows, uint64_t stream, int64_t offset = 0) {
  Tensor t = Tensor::empty({rows, kSeqLen}, DType::I32);
  const CounterRng rng(kSeed, stream == 1 ? "pipeline test tokens" : "pipeline test targets");
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<int32_t>()[i] = static_cast<int32_t>(
        rng.bits64(static_cast<uint64_t>(i + offset * kSeqLen)) % args().vocab_size);
  }
  return t;
}

struct Reference {
  double loss_sum = 0;
  std::vector<float> token_losses;  // [rows, S] flat, microbatch after microbatch
  std::map<std::string, Tensor> grads;  // by parameter name
};

// Documents for block_causal: each sequence cut at 3 + its row index mod 5 and at 11.
Tensor stage_documents(int64_t rows) {
  Tensor t = Tensor::empty({rows, kSeqLen}, DType::I32);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t first = static_cast<int32_t>(3 + r % 5);
    for (int64_t i = 0; i < kSeqLen; ++i) {
      t.data<int32_t>()[r * kSeqLen + i] = i < first ? 0 : (i < 11 ? first : 11);
    }
  }
  return t;
}

// The whole model in this process: every microbatch's forward and backward, accumulating.
Reference whole_model(const Tensor& tokens, const Tensor& targets, double grad_scale,
                      const Tensor& doc_start) {
  model::Transformer whole(args(), DType::F32);
  whole.allocate();
  whole.init_weights(kSeed);
  Reference ref;
  for (int64_t m = 0; m * kMicrobatchSize < tokens.size(0); ++m) {
    const Tensor x = tokens.narrow(0, m * kMicrobatchSize, kMicrobatchSize).contiguous();
    const Tensor y = targets.narrow(0, m * kMicrobatchSize, kMicrobatchSize).contiguous();
    const Tensor d = doc_start.defined()
                         ? doc_start.narrow(0, m * kMicrobatchSize, kMicrobatchSize).contiguous()
                         : Tensor();
    ref.loss_sum += whole.forward(x, y, grad_scale, d);
    const Tensor losses = whole.take_token_losses();
    ref.token_losses.insert(ref.token_losses.end(), losses.data<float>(),
                            losses.data<float>() + losses.numel());
    whole.backward();
  }
  for (model::Parameter* p : whole.parameters()) ref.grads[p->name] = p->grad.clone();
  return ref;
}

double max_relative_difference(const Tensor& got, const Tensor& want) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, std::abs(double(want.data<float>()[i])));
  for (int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, std::abs(double(got.data<float>()[i]) - want.data<float>()[i]) /
                                std::max(scale, 1e-30));
  }
  return worst;
}

// This rank's parts of the schedule's stages, and an executor running them.
struct RankPipeline {
  std::vector<std::unique_ptr<model::Transformer>> parts;
  ParallelModel parallel;  // under FSDP: the shards and the hooks
  std::unique_ptr<PipelineExecutor> executor;
};

// With `fsdp`, the parts are parallelized (their storage FSDP's shards) with that gradient
// reduction; without, each part holds its parameters whole.
RankPipeline build(const pp::PipelineSchedule& schedule, const DeviceMesh& mesh,
                   const ParallelizeOptions* fsdp = nullptr) {
  const std::vector<pp::StageLayers> stages =
      pp::split_stages(args().n_layers, schedule.num_stages(), {}, {"pp", "", "", ""}).value();
  RankPipeline rank;
  std::vector<PipelineStage> held;
  for (int64_t s : schedule.placement.stages_of(mesh.coordinate(MeshDim::Pp))) {
    const pp::StageLayers& l = stages[static_cast<size_t>(s)];
    auto part = std::make_unique<model::Transformer>(
        args(), DType::F32, model::ModelPart{l.first_layer, l.end_layer, l.embedding, l.output});
    if (fsdp == nullptr) {
      part->allocate();
      part->init_weights(kSeed);
      part->zero_grad();
    }
    held.push_back({s, part.get()});
    rank.parts.push_back(std::move(part));
  }
  if (fsdp != nullptr) {
    std::vector<model::Transformer*> parts;
    for (const auto& part : rank.parts) parts.push_back(part.get());
    rank.parallel = parallelize(parts, mesh, *fsdp);
    rank.parallel.data_parallel->init_weights(kSeed);
    rank.parallel.data_parallel->zero_grad();
  }
  PipelineShape shape;
  shape.microbatch_size = kMicrobatchSize;
  shape.dim = args().dim;
  rank.executor = std::make_unique<PipelineExecutor>(schedule, held, mesh, shape);
  return rank;
}

// The id of the last operation this process posted on any communicator (the flight recorder's).
uint64_t last_posted_id() {
  const std::vector<OpRecord> last = CollectiveRecorder::instance().recent(1);
  return last.empty() ? 0 : last.back().id;
}

// Every message of `list` since operation `after` went on the channel of its kind and direction
// between this rank and its peer ("pp 1→2 activations"), as many as the list has on each: counted
// from the flight recorder, which names each operation's communicator.
void check_routed(const std::vector<pp::Action>& list, int64_t me, uint64_t after) {
  std::map<std::string, int> listed, posted;
  for (const pp::Action& a : list) {
    if (!a.is_send() && !a.is_receive()) continue;
    const bool activation =
        a.kind == pp::ActionKind::SEND_ACT || a.kind == pp::ActionKind::RECV_ACT;
    const int64_t from = a.is_send() ? me : a.peer, to = a.is_send() ? a.peer : me;
    ++listed[std::string(a.is_send() ? "send" : "recv") + " on pp " + std::to_string(from) + "→" +
             std::to_string(to) + (activation ? " activations" : " gradients")];
  }
  for (const OpRecord& op : CollectiveRecorder::instance().recent(CollectiveRecorder::kHistory)) {
    if (op.id <= after || op.seq != 0) continue;  // earlier, or a collective
    ++posted[op.op.substr(0, 4) + " on " + op.comm_name];
  }
  CHECK(posted == listed);
}

// `peer_channels`: the messages on two-rank communicators of their own per kind and direction,
// as NCCL carries them (parallel/comm/peer_channels.h), instead of MPI's tags.
void check_schedule(pp::ScheduleKind kind, int64_t v, int64_t m, bool documents = false,
                    bool peer_channels = false) {
  const int64_t p = world_size();
  const std::string name = std::string(pp::kScheduleKindNames.name(kind));
  INFO(name, " on pp ", p, ", v ", v, ", m ", m, documents ? ", block_causal" : "",
       peer_channels ? ", peer channels" : "");
  pp::ValueOrRefusal<pp::PipelineSchedule> schedule = pp::generate_schedule(kind, p, v, m);
  REQUIRE_MESSAGE(schedule.ok(), schedule.error());
  MeshDegrees degrees;
  degrees.pp = p;
  degrees.dp_shard = 1;
  CommOptions comm;
  comm.mpi_peer_channels = peer_channels;
  const DeviceMesh mesh = DeviceMesh::root(ParallelDims::resolve(degrees, p), world_rank(), comm);
  RankPipeline rank = build(schedule.value(), mesh);

  const Tensor tokens = random_stage_tokens(m * kMicrobatchSize, 1);
  const Tensor targets = random_stage_tokens(m * kMicrobatchSize, 2);
  const double grad_scale = 1.0 / static_cast<double>(tokens.numel());
  const Tensor doc_start = documents ? stage_documents(tokens.size(0)) : Tensor();
  const Reference ref = whole_model(tokens, targets, grad_scale, doc_start);
  // Two steps on the same batch: the second accumulates onto the first's gradients, as
  // gradient accumulation over local batches does.
  const uint64_t posted_before = last_posted_id();
  double loss = rank.executor->train(tokens, targets, grad_scale, doc_start);
  if (peer_channels) {
    check_routed(schedule.value().ranks[static_cast<size_t>(mesh[MeshDim::Pp].rank())],
                 mesh[MeshDim::Pp].rank(), posted_before);
  }
  loss += rank.executor->train(tokens, targets, grad_scale, doc_start);

  Tensor total = Tensor::from_vector<double>({loss}, {1});
  mesh[MeshDim::Pp].comm().all_reduce(total, ReduceOp::Sum);
  CHECK(std::abs(total.data<double>()[0] - 2 * ref.loss_sum) <= 1e-5 * std::abs(2 * ref.loss_sum));
  double worst = 0;
  for (const auto& part : rank.parts) {
    for (model::Parameter* param : part->parameters()) {
      Tensor twice = ref.grads.at(param->name).clone();
      for (int64_t i = 0; i < twice.numel(); ++i) twice.data<float>()[i] *= 2;
      const double rel = max_relative_difference(param->grad, twice);
      worst = std::max(worst, rel);
      CHECK_MESSAGE(rel <= 1e-5, param->name, ": gradient differs from the whole model's by ", rel);
    }
  }
  const PipelineTiming& timing = rank.executor->last_timing();
  MESSAGE(name, " pp ", p, " rank ", world_rank(), ": worst gradient difference ", worst,
          ", waited ", timing.wait_seconds, " of ", timing.seconds, " s");
  // The timing adds up: every compute of the list timed once, and the computes and the waits
  // are apart from each other inside the list's time (a compute's wait for its input is taken
  // off its own).
  const std::vector<pp::Action>& list =
      schedule.value().ranks[static_cast<size_t>(mesh[MeshDim::Pp].rank())];
  const auto listed =
      std::count_if(list.begin(), list.end(), [](const pp::Action& a) { return a.is_compute(); });
  int64_t counted = 0;
  double computing = 0;
  for (size_t k = 0; k < timing.computes.size(); ++k) {
    counted += timing.computes[k];
    computing += timing.compute_seconds[k];
    CHECK(timing.compute_seconds[k] >= 0);
  }
  CHECK(counted == listed);
  CHECK(timing.ran.size() == static_cast<size_t>(listed));
  CHECK(timing.wait_seconds >= 0);
  CHECK(computing > 0);
  CHECK(computing + timing.wait_seconds <= timing.seconds + 1e-9);  // + the sums' rounding

  // Forward only: the same loss, no gradient touched.
  std::map<std::string, Tensor> before;
  for (const auto& part : rank.parts) {
    for (model::Parameter* param : part->parameters()) before[param->name] = param->grad.clone();
  }
  Tensor evaluated = Tensor::from_vector<double>(
      {rank.executor->evaluate(tokens, targets, kMicrobatchSize, doc_start)}, {1});
  mesh[MeshDim::Pp].comm().all_reduce(evaluated, ReduceOp::Sum);
  CHECK(std::abs(evaluated.data<double>()[0] - ref.loss_sum) <= 1e-5 * std::abs(ref.loss_sum));
  for (const auto& part : rank.parts) {
    for (model::Parameter* param : part->parameters()) {
      CHECK(max_relative_difference(param->grad, before.at(param->name)) == 0);
    }
  }

  // Each token's loss, kept by the rank that holds the head and by no other: the whole model's.
  const Tensor token_losses = rank.executor->evaluate_tokens(tokens, targets, kMicrobatchSize,
                                                             doc_start);
  bool head = false;
  for (const auto& part : rank.parts) head = head || part->has_head();
  REQUIRE(token_losses.defined() == head);
  Tensor holders = Tensor::from_vector<double>({head ? 1.0 : 0.0}, {1});
  mesh[MeshDim::Pp].comm().all_reduce(holders, ReduceOp::Sum);
  CHECK(holders.data<double>()[0] == 1.0);
  if (head) {
    REQUIRE(token_losses.shape() == Shape({tokens.size(0), tokens.size(1)}));
    REQUIRE(static_cast<size_t>(token_losses.numel()) == ref.token_losses.size());
    for (size_t i = 0; i < ref.token_losses.size(); ++i) {
      CHECK(std::abs(token_losses.data<float>()[i] - ref.token_losses[i]) <=
            1e-5 * std::abs(ref.token_losses[i]));
    }
  }
}

TEST_CASE("pipeline executor: every schedule's gradients and loss equal the whole model's") {
  const int64_t p = world_size();
  check_schedule(pp::ScheduleKind::GPIPE, 1, p);
  check_schedule(pp::ScheduleKind::ONE_F_ONE_B, 1, 2 * p);
  check_schedule(pp::ScheduleKind::INTERLEAVED_1F1B, 2, 2 * p);
  check_schedule(pp::ScheduleKind::INTERLEAVED_ZERO_BUBBLE, 2, 2 * p);
  check_schedule(pp::ScheduleKind::ZBV_ZERO_BUBBLE, 2, 2 * p);
  check_schedule(pp::ScheduleKind::ONE_F_ONE_B, 1, 2 * p, /*documents=*/true);
  check_schedule(pp::ScheduleKind::ZBV_ZERO_BUBBLE, 2, 2 * p, /*documents=*/true);
}

TEST_CASE("pipeline executor over peer channels: every schedule equals the whole model") {
  // The routing NCCL relies on (each kind and direction between neighbours on a communicator of
  // its own, cut in rounds round the ring), over MPI: pp 4's interleaved lists send from the last
  // stage back to rank 0, and ZBV's both ways between the same two ranks.
  const int64_t p = world_size();
  for (const auto& [kind, name] : pp::kScheduleKindNames.entries()) {
    check_schedule(kind, pp::is_single_stage(kind) ? 1 : 2, 2 * p, /*documents=*/false,
                   /*peer_channels=*/true);
  }
}

TEST_CASE("pipeline executor: Ws run in place of a late receive leave every gradient bit for bit") {
  // Rank 0 slowed before each of its computes: the others' receives come late, and they run
  // their next Ws instead of waiting. The gradients must be those of a run in the list's order.
  const int64_t p = world_size();
  const int64_t m = 2 * p;
  pp::ValueOrRefusal<pp::PipelineSchedule> schedule =
      pp::generate_schedule(pp::ScheduleKind::INTERLEAVED_ZERO_BUBBLE, p, 2, m);
  REQUIRE_MESSAGE(schedule.ok(), schedule.error());
  MeshDegrees degrees;
  degrees.pp = p;
  degrees.dp_shard = 1;
  const DeviceMesh mesh = DeviceMesh::root(ParallelDims::resolve(degrees, p), world_rank());
  const Tensor tokens = random_stage_tokens(m * kMicrobatchSize, 1);
  const Tensor targets = random_stage_tokens(m * kMicrobatchSize, 2);
  const double grad_scale = 1.0 / static_cast<double>(tokens.numel());

  // As the timing has it (a W may or may not run early here), then with rank 0 slowed: a run's
  // bits must not depend on its timing.
  RankPipeline in_order = build(schedule.value(), mesh);
  const double loss = in_order.executor->train(tokens, targets, grad_scale);

  RankPipeline slowed = build(schedule.value(), mesh);
  if (world_rank() == 0) {
    slowed.executor->set_before_compute(
        [](const pp::Action&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  }
  const double slowed_loss = slowed.executor->train(tokens, targets, grad_scale);
  CHECK(slowed_loss == loss);
  for (size_t i = 0; i < slowed.parts.size(); ++i) {
    const std::vector<model::Parameter*> got = slowed.parts[i]->parameters();
    const std::vector<model::Parameter*> want = in_order.parts[i]->parameters();
    for (size_t k = 0; k < got.size(); ++k) {
      CHECK_MESSAGE(max_relative_difference(got[k]->grad, want[k]->grad) == 0, got[k]->name);
    }
  }
  const PipelineTiming& timing = slowed.executor->last_timing();
  Tensor early =
      Tensor::from_vector<double>({static_cast<double>(timing.weight_grads_run_early)}, {1});
  mesh[MeshDim::Pp].comm().all_reduce(early, ReduceOp::Sum);
  MESSAGE("pp ", p, ": ", early.data<double>()[0], " W ran early behind the slowed rank 0");
  CHECK(early.data<double>()[0] > 0);

  // The order this rank ran in, as recorded for the replay (pipeline::replay_run): every
  // compute once, only Ws ahead of their place, and moved exactly when some ran early. The
  // other ranks are taken as listed: the replay checks each rank's order on its own.
  const size_t me = static_cast<size_t>(mesh[MeshDim::Pp].rank());
  std::vector<std::vector<pp::RanCompute>> ran(static_cast<size_t>(p));
  for (size_t r = 0; r < ran.size(); ++r) {
    const std::vector<pp::Action>& list = schedule.value().ranks[r];
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k].is_compute()) ran[r].push_back({static_cast<int64_t>(k), 1});
    }
  }
  REQUIRE(timing.ran.size() == ran[me].size());
  ran[me] = timing.ran;
  pp::ValueOrRefusal<pp::PipelineSchedule> as_ran = pp::as_run(schedule.value(), ran);
  REQUIRE_MESSAGE(as_ran.ok(), as_ran.error());
  CHECK((as_ran.value().ranks[me] != schedule.value().ranks[me]) ==
        (timing.weight_grads_run_early > 0));
}

// pp = world / 2 × dp_shard 2: each dp rank's own batch through the schedule, twice (two local
// batches accumulated), then FSDP's finish_gradients. Every shard must hold its rows of twice the
// whole model's gradient over both batches, whichever way the stage's gradients were reduced.
void check_fsdp_schedule(pp::ScheduleKind kind, int64_t v, PipelineGradientReduction reduction) {
  const int64_t p = world_size() / 2;
  const int64_t m = 2 * p;
  INFO(pp::kScheduleKindNames.name(kind), " on pp ", p, " × dp_shard 2, gradient reduction ",
       kPipelineGradientReductions.name(reduction));
  pp::ValueOrRefusal<pp::PipelineSchedule> schedule = pp::generate_schedule(kind, p, v, m);
  REQUIRE_MESSAGE(schedule.ok(), schedule.error());
  MeshDegrees degrees;
  degrees.pp = p;
  degrees.dp_shard = 2;
  const DeviceMesh mesh = DeviceMesh::root(ParallelDims::resolve(degrees, 2 * p), world_rank());
  ParallelizeOptions options;
  options.pipeline_gradient_reduction = reduction;
  RankPipeline rank = build(schedule.value(), mesh, &options);

  const int64_t rows = m * kMicrobatchSize;
  const int64_t dp_rank = mesh.coordinate(MeshDim::DpShard);
  const Tensor all_tokens = random_stage_tokens(2 * rows, 1);
  const Tensor all_targets = random_stage_tokens(2 * rows, 2);
  const double grad_scale = 1.0 / static_cast<double>(all_tokens.numel());
  const Reference ref = whole_model(all_tokens, all_targets, grad_scale, Tensor());
  const Tensor tokens = all_tokens.narrow(0, dp_rank * rows, rows).contiguous();
  const Tensor targets = all_targets.narrow(0, dp_rank * rows, rows).contiguous();
  rank.executor->train(tokens, targets, grad_scale);
  rank.executor->train(tokens, targets, grad_scale);
  rank.parallel.data_parallel->finish_gradients();

  std::map<std::string, model::Parameter*> held;
  for (const auto& part : rank.parts) {
    for (model::Parameter* param : part->parameters()) held[param->name] = param;
  }
  double worst = 0;
  for (model::Parameter* shard : rank.parallel.data_parallel->optimizer_params()) {
    const Tensor& whole = ref.grads.at(shard->name);
    const int64_t whole_rows = whole.size(0), cols = whole.numel() / whole_rows;
    const int64_t shard_rows = shard->grad.size(0);
    const RowRange owned = fsdp_shard_range(whole_rows, 2, dp_rank);
    Tensor want = Tensor::zeros({shard_rows, cols}, DType::F32);
    for (int64_t i = 0; i < owned.count * cols; ++i) {
      want.data<float>()[i] = 2 * whole.data<float>()[owned.begin * cols + i];
    }
    const double rel = max_relative_difference(shard->grad.view({shard_rows, cols}), want);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= 1e-5, shard->name, ": shard gradient differs by ", rel);
    // Reduced per microbatch, nothing unsharded is left on the rank; reduced per step, the
    // same once finish_gradients has run.
    CHECK_FALSE(held.at(shard->name)->grad.defined());
  }
  MESSAGE(pp::kScheduleKindNames.name(kind), " pp ", p, " × dp_shard 2, ",
          kPipelineGradientReductions.name(reduction), ", rank ", world_rank(),
          ": worst shard gradient difference ", worst);
}

TEST_CASE("pipeline executor under FSDP: each gradient reduction gives the whole model's") {
  const bool pp_by_two = world_size() % 2 == 0 && world_size() >= 4;
  REQUIRE_MESSAGE(pp_by_two, "runs on pp × dp_shard 2: mpirun -np 4 or more, got " << world_size());
  for (const auto& [reduction, name] : kPipelineGradientReductions.entries()) {
    // A full backward with one stage a rank and with two (FSDP's prefetch stops at a stage's
    // end), and a split backward whose W reduces.
    check_fsdp_schedule(pp::ScheduleKind::ONE_F_ONE_B, 1, reduction);
    check_fsdp_schedule(pp::ScheduleKind::INTERLEAVED_1F1B, 2, reduction);
    check_fsdp_schedule(pp::ScheduleKind::ZBV_ZERO_BUBBLE, 2, reduction);
  }
}

}  // namespace
}  // namespace titan::parallel
