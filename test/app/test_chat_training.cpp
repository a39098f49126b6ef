// Fine-tuning on conversations end to end: conversations from the King James Bible, rendered in
// Llama 3's chat format by titan_tokenize --chat (with a byte-level tokenizer that has Llama 3's
// chat tokens, app/chat_tokenizer.py, so that the debug model's vocabulary holds it) and trained
// with the loss on the answers only: every mesh of the check tier tracks one rank, each step's
// trained-token count is the same on all of them and below the batch's tokens, and block_causal
// under cp follows one rank too.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/metrics_file.h"
#include "support/process.h"
#include "support/tokenizer_reference.h"
#include "support/training_run.h"

using namespace titan::testing;
namespace fs = std::filesystem;

namespace chat_training_test {

constexpr const char* kScratch = "chat_training";
constexpr int kSteps = 10;

// The tokenizer and the packed conversations, made once per test process.
struct ChatData {
  std::string tokenizer, bin;
};

const ChatData& chat_data() {
  static const ChatData data = [] {
    const std::string dir = scratch_dir(kScratch) + "/data";
    fs::create_directories(dir);
    ChatData d{dir + "/tokenizer.json", dir + "/chats.bin"};
    const ProcessResult tok = run_process("/usr/bin/python3 " +
                                          source_path("test/app/chat_tokenizer.py") + " '" +
                                          llama3_tokenizer_json() + "' " + d.tokenizer);
    REQUIRE_MESSAGE(tok.exit_code == 0, tok.err);
    // A question naming a verse, its answer the verse's first words (ASCII, a few dozen bytes,
    // so that a conversation fits a window of 64 byte tokens).
    std::ifstream kjv(source_path("corpus/kjv.txt"));
    std::ofstream out(dir + "/chats.jsonl");
    std::string line;
    for (int i = 0; i < 400 && std::getline(kjv, line);) {
      std::string ascii;
      for (char c : line) {
        if (c >= ' ' && c <= '~' && c != '"' && c != '\\') ascii += c;
      }
      if (ascii.size() < 30) continue;
      out << "{\"messages\": [{\"role\": \"user\", \"content\": \"Verse " << i
          << "?\"}, {\"role\": \"assistant\", \"content\": \"" << ascii.substr(0, 22)
          << "\"}]}\n";
      ++i;
    }
    out.close();
    const ProcessResult packed = run_process(binary_path("titan_tokenize") + " --chat --tokenizer " +
                                             d.tokenizer + " --seq-len 128 " + dir +
                                             "/chats.jsonl " + d.bin);
    REQUIRE_MESSAGE(packed.exit_code == 0, packed.err);
    MESSAGE(packed.out);
    return d;
  }();
  return data;
}

std::vector<std::map<std::string, double>> chat_run(const std::string& name, int ranks,
                                                    const std::string& flags) {
  const ChatData& d = chat_data();
  const TrainingRun run = train_debug_model(
      kScratch, name,
      "--training.steps " + std::to_string(kSteps) +
          " --training.seq_len 128 --training.global_batch_size 8 --data.path " + d.bin +
          " --model.hf_assets_path " + d.tokenizer + " " + flags,
      ranks == 1 ? "" : mpirun_launcher(ranks));
  REQUIRE_MESSAGE(run.losses.size() == static_cast<size_t>(kSteps), name << ": "
                                                                          << run.losses.size());
  return read_metrics_jsonl(scratch_dir(kScratch) + "/" + name + ".jsonl");
}

void check_tracks(const std::string& name, const std::vector<std::map<std::string, double>>& got,
                  const std::vector<std::map<std::string, double>>& reference) {
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double a = got[step].at("loss"), b = reference[step].at("loss");
    const double rel = std::abs(a - b) / std::abs(b);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= 1e-3, name << " step " << step + 1 << ": loss " << a << " vs one rank " << b);
    CHECK(got[step].at("trained_tokens") == reference[step].at("trained_tokens"));
  }
  MESSAGE(name << " on conversations: worst relative loss difference over " << kSteps
               << " steps " << worst);
}

TEST_SUITE("check node ranks=4") {
  TEST_CASE("conversations: mesh (1 2 2) and tp 2 and pp 2 and cp 2 track one rank with the loss on the answers") {
    const auto reference = chat_run("one_rank", 1, "--training.local_batch_size 8");
    CHECK(reference.back().at("loss") < reference.front().at("loss"));
    for (const auto& line : reference) {
      CHECK(line.at("trained_tokens") > 0);
      CHECK(line.at("trained_tokens") < 8 * 128 / 2);  // the answers, well under the window
    }
    check_tracks("mesh (1,2,2)",
                 chat_run("mesh_1_2_2", 4,
                          "--parallelism.dp_shard 2 --parallelism.tp 2 --training.local_batch_size 4"),
                 reference);
    check_tracks("tp 2",
                 chat_run("tp_2", 2, "--parallelism.dp_shard 1 --parallelism.tp 2"
                                     " --training.local_batch_size 8"),
                 reference);
    check_tracks("pp 2",
                 chat_run("pp_2", 2, "--parallelism.dp_shard 1 --parallelism.pipeline_parallel_degree 2"
                                     " --training.local_batch_size 8"),
                 reference);
    check_tracks("cp 2",
                 chat_run("cp_2", 2, "--parallelism.dp_shard 1 --parallelism.context_parallel_degree 2"
                                     " --training.local_batch_size 8"),
                 reference);
    // Each conversation a document: block_causal on cp 2 against one rank.
    const auto block_one = chat_run("block_one_rank", 1,
                                    "--training.local_batch_size 8 --model.attention_mask block_causal");
    // Two conversations a window: the second one's answer sees the first under causal
    // attention, not under block_causal.
    CHECK(block_one[0].at("loss") != reference[0].at("loss"));
    check_tracks("block_causal cp 2",
                 chat_run("block_cp_2", 2,
                          "--parallelism.dp_shard 1 --parallelism.context_parallel_degree 2"
                          " --training.local_batch_size 8 --model.attention_mask block_causal"),
                 block_one);
  }
}

TEST_SUITE("check node") {
  TEST_CASE("conversations: titan_generate --eval and titan_train's validation give one loss over the answers") {
    const ChatData& d = chat_data();
    const std::string dump = scratch_dir(kScratch) + "/eval_dump";
    fs::remove_all(dump);
    const TrainingRun run = train_debug_model(
        kScratch, "validated",
        "--training.steps 2 --training.seq_len 128 --training.local_batch_size 4 --data.path " +
            d.bin + " --validation.enable true --validation.freq 2 --validation.steps 2"
            " --validation.dataset_path " + d.bin +
            " --checkpoint.enable true --checkpoint.interval 2 --job.dump_folder " + dump);
    const auto lines = read_metrics_jsonl(scratch_dir(kScratch) + "/validated.jsonl");
    REQUIRE(lines.size() == 2);
    REQUIRE(lines[1].count("val_loss") == 1);
    const ProcessResult eval = run_process(
        binary_path("titan_generate") + " --model " + dump + "/checkpoint/step-2 --eval " + d.bin +
        " --eval-steps 2 --eval-batch-size 4 --eval-seq-len 128");
    REQUIRE_MESSAGE(eval.exit_code == 0, eval.err);
    const size_t at = eval.out.find("loss ");
    REQUIRE(at != std::string::npos);
    const double loss = std::stod(eval.out.substr(at + 5));
    MESSAGE("val_loss " << lines[1].at("val_loss") << ", titan_generate --eval " << loss);
    CHECK(std::abs(loss - lines[1].at("val_loss")) <= 1e-5 * loss);
  }
}

}  // namespace chat_training_test
