// Pipeline parallelism end to end (docs/pipeline.md): titan_train on pp 2 and pp 4 tracks one
// rank's loss to 1e-5 for 10 steps under every schedule, with gradient accumulation too, and
// composed with FSDP and TP, async TP, rowwise FP8 with full activation checkpointing; a
// checkpoint saved at pp 2 resumes bit for bit at pp 2 and within 1e-5 at pp 1 and pp 4; and
// 1F1B holds at most pp microbatches of activations where GPipe holds them all (the memory
// snapshot's activations at the peak).
//
// The reference is one rank accumulating microbatches of the pipeline's microbatch size over
// the same global batch: a pipeline step is gradient accumulation whose microbatches are spread
// over the stages, so the two do the same arithmetic (rowwise FP8's grad-weight scales, which
// run along the tokens of a microbatch, included). Sequences are 32 tokens so that 8 ranks on 2
// cores stay quick; the arithmetic per token is the debug model's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

constexpr int kPipelineSteps = 10;
constexpr int kPipelineGlobalBatch = 8;
const std::string kScratch = "pipeline_training";

std::string common(int steps = kPipelineSteps) {
  return "--training.steps " + std::to_string(steps) +
         " --training.seq_len 32 --training.global_batch_size " +
         std::to_string(kPipelineGlobalBatch) + " ";
}

// titan_train on `ranks` ranks, with its per-step losses.
TrainingRun run(const std::string& name, int ranks, const std::string& flags,
                int steps = kPipelineSteps) {
  TrainingRun result = train_debug_model(kScratch, name, common(steps) + flags,
                                         ranks == 1 ? "" : mpirun_launcher(ranks));
  REQUIRE_MESSAGE(result.losses.size() == static_cast<size_t>(steps),
                  name << ": " << result.losses.size() << " steps logged");
  return result;
}

std::vector<double> losses(const std::string& name, int ranks, const std::string& flags,
                           int steps = kPipelineSteps) {
  return run(name, ranks, flags, steps).losses;
}

// The closing pipeline line's three bubbles: simulated at the mean costs, replayed with each
// action's own time, measured. Each must be a share of the time: the replay ran on the orders the
// executor recorded (a refusal prints "not replayed" instead).
void check_closing_bubbles(const std::string& name, const TrainingRun& trained) {
  const std::string text = trained.process.out + trained.process.err;
  const size_t line = text.find("pipeline: one stage on one microbatch took");
  REQUIRE_MESSAGE(line != std::string::npos, name << ": no closing pipeline line");
  const std::string closing = text.substr(line, text.find('\n', line) - line);
  CAPTURE(closing);
  CHECK(closing.find("not replayed") == std::string::npos);
  for (const char* label : {"the schedule idles ", "with each action's own time ", "measured "}) {
    const size_t at = closing.find(label);
    REQUIRE_MESSAGE(at != std::string::npos, label);
    const double share = std::stod(closing.substr(at + std::string(label).size()));
    CHECK(share >= 0.0);
    CHECK(share < 1.0);
  }
}

// One rank accumulating microbatches of `microbatch` sequences: the pipeline's arithmetic.
std::vector<double> reference(int microbatch, const std::string& extra = "") {
  return losses("reference_mb" + std::to_string(microbatch) + (extra.empty() ? "" : "_variant"), 1,
                "--training.local_batch_size " + std::to_string(microbatch) + " " + extra);
}

void check_pipeline_tracks(const std::string& name, const std::vector<double>& got,
                           const std::vector<double>& want, double tolerance = 1e-5) {
  check_losses_track(name, got, want, tolerance);
}

std::string pipeline_flags(int pp, const std::string& schedule, int local_batch, int microbatch) {
  return "--parallelism.pipeline_parallel_degree " + std::to_string(pp) +
         " --parallelism.pipeline_parallel_schedule " + schedule + " --training.local_batch_size " +
         std::to_string(local_batch) + " --parallelism.pipeline_parallel_microbatch_size " +
         std::to_string(microbatch) + " ";
}

const char* const kSchedules[] = {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble",
                                  "ZBVZeroBubble"};

// Every schedule on pp ranks: 8 microbatches of 1 in one step, and 4 microbatches of 1 in each
// of two accumulated steps.
void check_every_schedule(int pp) {
  const std::vector<double> want = reference(1);
  for (const char* schedule : kSchedules) {
    const std::string tag = std::string(schedule) + "_pp" + std::to_string(pp);
    check_pipeline_tracks(tag, losses(tag, pp, pipeline_flags(pp, schedule, 8, 1)), want);
    check_pipeline_tracks(tag + " accumulating",
                          losses(tag + "_ga", pp, pipeline_flags(pp, schedule, 4, 1)), want);
  }
}

}  // namespace

TEST_SUITE("check ranks=2") {
  TEST_CASE("pipeline: 1F1B and ZBVZeroBubble on pp 2 track one rank with accumulation too") {
    const std::vector<double> want = reference(2);
    check_pipeline_tracks("1F1B pp 2", losses("1f1b_pp2", 2, pipeline_flags(2, "1F1B", 8, 2)), want);
    // The V placement (rank 0 holds the first and the last stage), the split backward, and two
    // accumulated pipeline steps per optimizer step: two list runs per step to replay.
    const TrainingRun zbv = run("zbv_pp2_ga", 2, pipeline_flags(2, "ZBVZeroBubble", 4, 2));
    check_pipeline_tracks("ZBVZeroBubble pp 2, 2 accumulated steps", zbv.losses, want);
    check_closing_bubbles("ZBVZeroBubble pp 2", zbv);
  }
}

TEST_SUITE("matrix ranks=2") {
  TEST_CASE("pipeline: every schedule on pp 2 tracks one rank with accumulation too") {
    check_every_schedule(2);
  }

  TEST_CASE("pipeline: pp 2 with rowwise FP8 and full activation checkpointing tracks one rank") {
    const std::string fp8 =
        "--float8.enabled true --float8.recipe rowwise --activation_checkpoint.mode full ";
    check_pipeline_tracks(
        "pp 2 rowwise FP8 full AC",
        losses("fp8_full_ac", 2, pipeline_flags(2, "InterleavedZeroBubble", 8, 2) + fp8),
        reference(2, fp8));
  }
}

TEST_SUITE("matrix ranks=4") {
  TEST_CASE("pipeline: every schedule on pp 4 tracks one rank with accumulation too") {
    check_every_schedule(4);
  }

  TEST_CASE("pipeline: pp 2 ZBVZeroBubble with async TP on tp 2 tracks one rank") {
    // Each W gathers its tp operands again (model/weight_grad_queue.h).
    check_pipeline_tracks(
        "pp 2 × tp 2 async",
        losses("async_tp", 4,
               pipeline_flags(2, "ZBVZeroBubble", 8, 2) +
                   "--parallelism.tp 2 --parallelism.enable_async_tensor_parallel true"),
        reference(2));
  }
}

TEST_SUITE("matrix ranks=8") {
  TEST_CASE("pipeline: (dp_shard 2 tp 2 pp 2) on 8 ranks tracks one rank") {
    // Each dp rank's pipeline runs 4 microbatches of 1; FSDP reduces each group's gradients
    // after every microbatch (the default gradient reduction).
    check_pipeline_tracks("pp 2 × dp_shard 2 × tp 2",
                          losses("pp2_fsdp2_tp2", 8,
                                 pipeline_flags(2, "Interleaved1F1B", 4, 1) +
                                     "--parallelism.dp_shard 2 --parallelism.tp 2"),
                          reference(1));
  }
}

namespace {

// 4 steps of pp 2 (1F1B, 8 microbatches of 1), saving every 2 steps into <dump>/checkpoint.
std::string checkpointed(const std::string& dump) {
  return "--checkpoint.enable true --checkpoint.interval 2 --checkpoint.keep_latest_k 0 "
         "--job.dump_folder " +
         dump + " ";
}

// A dump folder holding only step 2 of `saved`.
std::string copy_pipeline_step_2(const std::string& saved, const std::string& name) {
  const std::string dump = scratch_dir(kScratch) + "/" + name;
  fs::remove_all(dump);
  fs::create_directories(dump + "/checkpoint");
  fs::copy(saved + "/checkpoint/step-2", dump + "/checkpoint/step-2", fs::copy_options::recursive);
  return dump;
}

}  // namespace

TEST_SUITE("check ranks=4") {
  TEST_CASE(
      "pipeline: a checkpoint saved at pp 2 resumes at pp 2 bit for bit and at pp 1 and pp 4 "
      "within 1e-5") {
    const std::string saved = scratch_dir(kScratch) + "/saved_pp2";
    fs::remove_all(saved);
    const std::vector<double> whole =
        losses("saved_pp2", 2, pipeline_flags(2, "1F1B", 8, 1) + checkpointed(saved), 4);
    REQUIRE(fs::exists(saved + "/checkpoint/step-2/metadata.json"));

    // The same mesh, from step 2: the losses of steps 3 and 4 to the last bit.
    const std::vector<double> same =
        train_debug_model(kScratch, "resumed_pp2",
                          common(4) + pipeline_flags(2, "1F1B", 8, 1) +
                              checkpointed(copy_pipeline_step_2(saved, "resume_pp2")),
                          mpirun_launcher(2))
            .losses;
    REQUIRE(same.size() == 2);
    CHECK(same[0] == whole[2]);
    CHECK(same[1] == whole[3]);

    // One rank, and pp 4 with two stages per rank: other owners of every tensor.
    const std::vector<double> one =
        train_debug_model(kScratch, "resumed_pp1",
                          common(4) + "--training.local_batch_size 1 " +
                              checkpointed(copy_pipeline_step_2(saved, "resume_pp1")))
            .losses;
    REQUIRE(one.size() == 2);
    check_pipeline_tracks("resumed at pp 1", one, {whole[2], whole[3]});
    const std::vector<double> four =
        train_debug_model(kScratch, "resumed_pp4",
                          common(4) + pipeline_flags(4, "Interleaved1F1B", 8, 1) +
                              checkpointed(copy_pipeline_step_2(saved, "resume_pp4")),
                          mpirun_launcher(4))
            .losses;
    REQUIRE(four.size() == 2);
    check_pipeline_tracks("resumed at pp 4", four, {whole[2], whole[3]});
  }
}

namespace {

// The bytes of activations (every "activations.*" category) in rank `rank`'s snapshot at its
// peak, from the run's snapshot folder.
double activation_bytes_at_peak(const std::string& dump, int rank) {
  for (const fs::directory_entry& step : fs::directory_iterator(dump + "/memory_snapshot")) {
    const fs::path file = step.path() / ("rank" + std::to_string(rank) + "_memory_snapshot.json");
    if (!fs::exists(file)) continue;
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    double total = 0;
    for (size_t at = json.find("\"activations."); at != std::string::npos;
         at = json.find("\"activations.", at + 1)) {
      total += std::stod(json.substr(json.find(':', at) + 1));
    }
    return total;
  }
  FAIL("no memory snapshot of rank " << rank << " under " << dump);
  return 0;
}

double pipeline_activations(const std::string& schedule) {
  const std::string dump = scratch_dir(kScratch) + "/memory_" + schedule;
  fs::remove_all(dump);
  losses("memory_" + schedule, 2,
         pipeline_flags(2, schedule, 8, 1) +
             "--profiling.enable_memory_snapshot true --job.dump_folder " + dump,
         2);
  return activation_bytes_at_peak(dump, 0);
}

}  // namespace

TEST_SUITE("check ranks=2") {
  TEST_CASE("pipeline: 1F1B holds at most pp microbatches of activations and GPipe all of them") {
    // Rank 0 of pp 2 with 8 microbatches: GPipe keeps all 8 microbatches' activations until its
    // backwards start, 1F1B at most 2 (pp − rank); at the peak each also has one microbatch's
    // backward working (its gradients). So 1F1B's peak is at most (pp + 1) microbatches' worth
    // of GPipe's 8, and GPipe's is at least (m − pp − 1) microbatches' worth more.
    const double gpipe = pipeline_activations("GPipe");
    const double one_f_one_b = pipeline_activations("1F1B");
    MESSAGE("activations at the peak on rank 0: GPipe " << gpipe / 1048576.0 << " MiB, 1F1B "
                                                        << one_f_one_b / 1048576.0 << " MiB");
    const double per_microbatch = gpipe / 8;
    CHECK(one_f_one_b <= 3 * per_microbatch);
    CHECK(gpipe - one_f_one_b >= 5 * per_microbatch * 0.9);
  }
}
