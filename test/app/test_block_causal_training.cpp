// block_causal end to end (model.attention_mask, docs/data.md#documents): titan_train on the
// King James Bible cut into one document per verse by titan_tokenize (32,291 documents of 134
// tokens on average, so a window of 64 tokens holds one to three of them), on the meshes of
// the check tier, logs the single rank's block_causal loss at every step; and the hostile
// streams train: one with no EOS at all has, bit for bit, the causal run's losses, one with an
// EOS at every token trains to finite losses that equal the causal run's to a rounding (every
// token alike, whatever it attends to gives the same values).
//
// The check tier runs the reference and one composed mesh, pp 2 × cp 2 (ring): the document
// starts cut head-tail with the tokens and handed to both stages; the matrix tier runs
// dp_shard 2, tp 2, cp 2 all-gather and dp_shard 2 × cp 2 × tp 2. The fast tier holds the
// model-level cases of cp (test_context_parallel: ring and all-gather on 2 and 4 ranks) and pp
// (test_pipeline_executor: 1F1B and ZBV on pp 2 and 4); docs/testing.md lists them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/token_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;

// Named, not anonymous: the tests of a binary compile in unity batches.
namespace block_causal_training {

constexpr int kSteps = 10;
constexpr double kTolerance = 1e-4;

// The Bible, one document per verse (BOS, its bytes, EOS), in this case's scratch folder.
std::string verse_documents() {
  const std::string path = scratch_dir("block_causal_training") + "/verses.bin";
  if (!std::filesystem::exists(path)) {
    const ProcessResult r =
        run_process(binary_path("titan_tokenize") +
                    " --text-documents line --threads 1 corpus/kjv.txt " + path);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  }
  return path;
}

// `steps` steps of 4 sequences of 64 tokens (the global batch) on `data`, `flags` on top.
std::vector<double> run(const std::string& name, int ranks, const std::string& data,
                        const std::string& flags, int steps = kSteps) {
  const TrainingRun r = train_debug_model(
      "block_causal_training", name,
      "--training.steps " + std::to_string(steps) +
          " --training.seq_len 64 --training.global_batch_size 4 --data.path " + data + " " + flags,
      ranks > 1 ? mpirun_launcher(ranks) : "");
  REQUIRE_MESSAGE(r.losses.size() == static_cast<size_t>(steps),
                  name << ": " << r.losses.size() << " steps logged");
  return r.losses;
}

std::vector<double> block_causal_reference() {
  const std::vector<double> reference =
      run("single_rank", 1, verse_documents(),
          "--model.attention_mask block_causal --training.local_batch_size 4");
  CHECK(reference.back() < reference.front());
  return reference;
}

void check_tracks(const std::string& name, const std::vector<double>& got,
                  const std::vector<double>& reference) {
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double rel = std::abs(got[step] - reference[step]) / std::abs(reference[step]);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= kTolerance, name << " step " << step + 1 << ": loss " << got[step]
                                          << " vs single rank " << reference[step]);
  }
  MESSAGE(name << " (block_causal): worst relative loss difference over " << kSteps << " steps "
               << worst);
}

void check_mesh(const std::string& name, int ranks, const std::string& flags,
                const std::vector<double>& reference) {
  check_tracks(name,
               run(name, ranks, verse_documents(), "--model.attention_mask block_causal " + flags),
               reference);
}

// A token file of `count` copies of `token` in this case's scratch folder.
std::string repeated_tokens(const std::string& name, int32_t token, int64_t count) {
  const std::string path = scratch_dir("block_causal_training") + "/" + name + ".bin";
  titan::data::write_token_file(path, std::vector<int32_t>(static_cast<size_t>(count), token),
                                titan::data::ByteTokenizer::kEos + 1, 2);
  return path;
}

TEST_SUITE("check ranks=4") {
  TEST_CASE("block_causal: pp 2 × cp 2 on verse documents tracks the single rank for 10 steps") {
    check_mesh("pp2_cp2", 4,
               "--parallelism.context_parallel_degree 2 --parallelism.context_parallel_comm ring "
               "--parallelism.pipeline_parallel_degree 2 "
               "--parallelism.pipeline_parallel_microbatch_size 2 --training.local_batch_size 4",
               block_causal_reference());
  }
}

TEST_SUITE("check") {
  TEST_CASE("block_causal: streams with no EOS and with an EOS at every token train") {
    // Three steps each: what is checked holds from the first.
    constexpr int kHostileSteps = 3;
    const std::string local = "--training.local_batch_size 4";
    const std::string masked = "--model.attention_mask block_causal " + local;
    // No EOS: every window is one document, and block_causal is causal bit for bit.
    const std::string none = repeated_tokens("no_eos", 'a', 4 * 64 * kHostileSteps + 1);
    const std::vector<double> causal = run("no_eos_causal", 1, none, local, kHostileSteps);
    const std::vector<double> no_eos = run("no_eos", 1, none, masked, kHostileSteps);
    CHECK(no_eos == causal);
    // An EOS at every token: each token a document of its own, seeing itself alone.
    const std::string every =
        repeated_tokens("every_eos", titan::data::ByteTokenizer::kEos, 4 * 64 * kHostileSteps + 1);
    const std::vector<double> own = run("every_eos", 1, every, masked, kHostileSteps);
    const std::vector<double> all = run("every_eos_causal", 1, every, local, kHostileSteps);
    for (int step = 0; step < kHostileSteps; ++step) {
      CHECK(std::isfinite(own[step]));
      CHECK(std::abs(own[step] - all[step]) <= 1e-5 * std::abs(all[step]));
    }
    MESSAGE("an EOS at every token: loss " << own.front() << " -> " << own.back());
  }
}

// Each mesh of two ranks on its own, beside pp 2 × cp 2 (the ring) above: every parallelism
// that cuts the documents' tokens or the model tracks one rank under block_causal.
TEST_SUITE("check ranks=2") {
  TEST_CASE("block_causal: dp_shard 2 and tp 2 and cp 2 all-gather each track the single rank") {
    const std::vector<double> reference = block_causal_reference();
    check_mesh("dp_shard2", 2, "--parallelism.dp_shard 2 --training.local_batch_size 2", reference);
    check_mesh("tp2", 2, "--parallelism.tp 2 --training.local_batch_size 4", reference);
    check_mesh("cp2_allgather", 2,
               "--parallelism.context_parallel_degree 2 --parallelism.context_parallel_comm "
               "allgather --training.local_batch_size 4",
               reference);
  }
}

TEST_SUITE("matrix ranks=8") {
  TEST_CASE("block_causal: dp_shard 2 × cp 2 × tp 2 tracks the single rank") {
    const std::vector<double> reference = block_causal_reference();
    check_mesh("dp_shard2_cp2_tp2", 8,
               "--parallelism.dp_shard 2 --parallelism.context_parallel_degree 2 "
               "--parallelism.tp 2 --training.local_batch_size 2",
               reference);
  }
}

}  // namespace block_causal_training
