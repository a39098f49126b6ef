// Real data end to end: corpora of compressed JSON lines → titan_tokenize with
// Llama 3's tokenizer.json → a folder of shards → titan_train with Llama 3's vocabulary, and a
// validation loss over held-out shards in its log and metrics.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/metrics_file.h"
#include "support/process.h"
#include "support/tokenizer_reference.h"

using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

// A JSON string literal of `text` (the corpus is plain English: quotes and backslashes only).
std::string json_quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Writes lines [first, first + count) of the King James Bible as `files` gzipped JSON lines
// files of one verse per object, {"id": n, "text": verse}, into `folder`.
void write_jsonl_gz(const fs::path& folder, int first, int count, int files) {
  fs::remove_all(folder);
  fs::create_directories(folder);
  std::ifstream kjv(source_path("corpus/kjv.txt"));
  REQUIRE_MESSAGE(kjv, "corpus/kjv.txt is missing: scripts/setup.sh writes it");
  std::string line;
  for (int i = 0; i < first && std::getline(kjv, line); ++i) {
  }
  for (int f = 0; f < files; ++f) {
    const fs::path plain = folder / ("part-" + std::to_string(f) + ".jsonl");
    {
      std::ofstream out(plain);
      for (int i = 0; i < count / files && std::getline(kjv, line); ++i) {
        out << "{\"id\": " << first + f * (count / files) + i << ", \"text\": " << json_quoted(line)
            << "}\n";
      }
    }
    REQUIRE(run_process("gzip -f '" + plain.string() + "'").exit_code == 0);
  }
}

}  // namespace

TEST_SUITE("check node") {
  TEST_CASE(
      "real data: .jsonl.gz through Llama 3's tokenizer into shards and trained on with a "
      "validation loss" * doctest::test_suite("matrix node")) {
    const std::string tokenizer = llama3_tokenizer_json();
    const fs::path dir = scratch_dir("real_data");
    write_jsonl_gz(dir / "train_corpus", 0, 3000, 3);
    write_jsonl_gz(dir / "val_corpus", 3000, 400, 1);

    for (const char* split : {"train", "val"}) {
      const ProcessResult r = run_process(
          binary_path("titan_tokenize") + " --tokenizer " + tokenizer +
          " --shard-tokens 30000 " + (dir / (std::string(split) + "_corpus")).string() + " " +
          (dir / (std::string(split) + "_shards")).string());
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    }
    int shards = 0;
    for (const auto& entry : fs::directory_iterator(dir / "train_shards")) {
      shards += entry.path().extension() == ".bin";
    }
    CHECK(shards >= 3);  // 3000 verses are ~100k Llama 3 tokens: several shards of 30000

    const std::string jsonl = (dir / "metrics.jsonl").string();
    fs::remove(jsonl);
    const std::string common =
        " --config configs/debug_model.yaml --data.path " + (dir / "train_shards").string() +
        " --training.steps 4 --training.seq_len 64 --training.local_batch_size 2"
        " --metrics.log_freq 1 --validation.enable true --validation.freq 2 --validation.steps 2"
        " --validation.dataset_path " + (dir / "val_shards").string();
    const ProcessResult train = run_process(binary_path("titan_train") + common +
                                            " --model.vocab_size 128256 --metrics.jsonl " + jsonl);
    REQUIRE_MESSAGE(train.exit_code == 0, train.err);
    CHECK(train.out.find("vocab 128256") != std::string::npos);
    CHECK(train.out.find("validation: step 2, loss") != std::string::npos);
    CHECK(train.out.find("validation: step 4, loss") != std::string::npos);
    const auto lines = read_metrics_jsonl(jsonl);
    REQUIRE(lines.size() == 4);
    for (const auto& line : lines) {
      const auto step = static_cast<int>(line.at("step"));
      CAPTURE(step);
      // Validation after step 1 and every 2nd (torchtitan's schedule).
      CHECK(line.count("val_loss") == (step == 1 || step % 2 == 0 ? 1u : 0u));
    }
    // An untrained model over 128256 tokens starts near ln(128256) = 11.76.
    CHECK(std::abs(lines[0].at("loss") - std::log(128256.0)) < 1.0);
    CHECK(std::isfinite(lines[3].at("val_loss")));

    // The debug model's own vocabulary (2048) cannot hold Llama 3's ids: refused before training.
    const ProcessResult small = run_process(binary_path("titan_train") + common);
    CHECK(small.exit_code == 2);
    CHECK(small.error_lines() == 1);
    CHECK(small.err.find("model.vocab_size: 2048") != std::string::npos);
    CHECK(small.err.find("128256") != std::string::npos);
  }

  TEST_CASE("real data: text through data.tokenizer_path trains with Llama 3's tokenizer") {
    const std::string tokenizer = llama3_tokenizer_json();
    const ProcessResult r = run_process(
        binary_path("titan_train") +
        " --config configs/debug_model.yaml --training.steps 1 --training.seq_len 64"
        " --training.local_batch_size 1 --model.vocab_size 128256 --data.tokenizer_path " +
        fs::path(tokenizer).parent_path().string());
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    // The whole KJV is 1,094,557 Llama 3 tokens (docs/tokenizer.md), plus BOS and EOS.
    CHECK(r.out.find("1094559 tokens") != std::string::npos);
  }
}
