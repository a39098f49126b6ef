// The start and end lines of a run (app/run_report.h) from facts, with no job: what each line
// says, and which are warnings.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/model_args.h"
#include "app/run_report.h"
#include "data/byte_tokenizer.h"
#include "data/documents.h"
#include "support/process.h"
#include "support/token_sources.h"

namespace titan::app {
namespace {

bool has_line(const std::vector<ReportLine>& lines, const std::string& start, bool warning) {
  for (const ReportLine& line : lines) {
    if (line.text.rfind(start, 0) == 0 && line.warning == warning) return true;
  }
  return false;
}

RunStartFacts facts_of(const JobConfig& c) {
  RunStartFacts f;
  f.args = model_args(c);
  f.dims = parallel::ParallelDims::resolve(1, 2, 1, 2);
  f.data_parallel = "FSDP over dp_shard";
  f.activation_checkpoint = "none";
  f.memory.param_bytes = 3 << 20;
  f.memory.grad_bytes = 3 << 20;
  f.optimizer_state_bytes = 6 << 20;
  f.data = "corpus (text)";
  f.windows_per_epoch = 100;
  f.batch = {16, 2, 4, 256};
  f.warmup_steps = 2;
  f.decay_steps = 8;
  return f;
}

TEST_SUITE("fast") {
  TEST_CASE("run report: the start lines name the model and mesh and memory and data and batch") {
    JobConfig c;
    c.training.seq_len = 256;
    c.training.local_batch_size = 4;
    const std::vector<ReportLine> lines = run_start_report(c, facts_of(c));
    CHECK(has_line(lines, "model debugmodel (llama3): dim 256, 6 layers", false));
    CHECK(has_line(lines,
                   "mesh dp_replicate 1 × dp_shard 2 × tp 1 = 2 ranks on cpu; FSDP over "
                   "dp_shard; activation checkpointing none",
                   false));
    CHECK(has_line(lines, "per rank: parameters 3.00 MiB, gradients 3.00 MiB, AdamW state 6.00 MiB",
                   false));
    CHECK(has_line(lines, "data corpus (text): 100 windows of 256 tokens per epoch", false));
    CHECK(has_line(lines, "batch: 16 sequences × 256 tokens per step (2 micro-steps of 4 per rank)",
                   false));
    // Nothing that is not on: no pipeline, FP8, cp, tp or validation lines.
    for (const char* absent :
         {"pipeline", "float8", "context parallel", "tensor parallel", "validation"}) {
      CHECK_FALSE(has_line(lines, absent, false));
    }
  }

  TEST_CASE("run report: validation that wraps its held-out data is a warning") {
    JobConfig c;
    c.validation.enable = true;
    RunStartFacts f = facts_of(c);
    f.validation_data = "held-out (text)";
    f.validation_batches = 3;
    f.validation_windows = 10;  // 3 batches of 4 × dp 2 need 24
    const std::vector<ReportLine> lines = run_start_report(c, f);
    CHECK(has_line(lines, "validation held-out (text): 3 batches of 8 sequences × 256 tokens",
                   false));
    CHECK(has_line(lines,
                   "validation.steps: 3 batches of 8 sequences need 24 windows but the "
                   "held-out data holds 10",
                   true));
  }

  TEST_CASE("run report: the end lines give the GEMMs' share on the CPU only and FSDP's peak") {
    RunEndFacts f;
    f.trained_steps = 10;
    f.seconds = 20;
    f.gemm = {100, 4e10, 5};
    std::vector<ReportLine> lines = run_end_report(f);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].text ==
          "trained 10 steps in 20.0 s; GEMMs took 5.0 s (25% of the time, 8.0 GFLOP/s over 100 "
          "calls)");
    f.cuda = true;
    f.params.peak_unsharded_bytes = 1 << 20;
    f.params.gathered_bytes = 10 << 20;
    lines = run_end_report(f);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0].text == "trained 10 steps in 20.0 s");
    CHECK(lines[1].text.rfind("FSDP: at most 1.00 MiB of gathered parameters", 0) == 0);
    CHECK(lines[2].text == "FSDP: all-gathered 1.00 MiB per step per rank");
  }

  TEST_CASE("run report: under block_causal tflops and MFU count the data's documents") {
    // Verses as titan_tokenize writes documents, each BOS bytes EOS: far shorter than a window.
    const std::string dir = testing::scratch_dir("run_report");
    {
      std::ofstream jsonl(dir + "/verses.jsonl");
      for (int i = 0; i < 64; ++i) jsonl << R"({"text": "In the beginning )" << i << "\"}\n";
    }
    const testing::ProcessResult r =
        testing::run_process(testing::binary_path("titan_tokenize") + " --threads 1 " + dir +
                             "/verses.jsonl " + dir + "/verses.bin");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const auto source = testing::open_source(dir + "/verses.bin", "bin");
    const JobConfig c;
    const model::ModelArgs args = model_args(c);
    const int64_t S = 256;
    RunFacts facts;
    facts.flops_per_token = model::training_flops_per_token(args, static_cast<double>(S));
    const ReportLine line =
        count_document_attention(facts, args, *source, S, data::ByteTokenizer::kEos);
    const data::DocumentContext d =
        data::sample_document_context(*source, S, data::ByteTokenizer::kEos);
    REQUIRE(d.windows > 0);
    CHECK(d.keys_per_token < S / 4.0);  // the verses are short
    CHECK(facts.attention_keys == d.keys_per_token);
    CHECK(facts.flops_per_token == model::training_flops_per_token(args, d.keys_per_token));
    CHECK(facts.flops_per_token < model::training_flops_per_token(args, static_cast<double>(S)));
    CHECK_FALSE(line.warning);
    CHECK(line.text.rfind("block_causal: tflops and MFU count attention over ", 0) == 0);
    CHECK(line.text.find(", not 256") != std::string::npos);
  }
}

}  // namespace
}  // namespace titan::app
