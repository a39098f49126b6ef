// titan_generate end to end, on a small model titan_train trains for 3 steps (validating on
// held-out shards after step 3, and saving that step): --eval over the same shards gives that
// step's val_loss, and so does --eval-attention-mask block_causal for a run trained and
// validated under model.attention_mask block_causal (the shards hold one document per verse);
// the checkpoint and its Hugging Face export (titan_convert) generate the same
// tokens; top-k 1 is greedy; a seed gives the same sample twice; a --stop text ends a
// completion; --max-new-tokens past the sequence limit is capped with a line saying so; and
// under mpirun, tensor parallel over 2 ranks generates what one rank does.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/small_model.h"
#include "support/tool_refusal.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

// dim 64, 2 layers, 4 heads over 2 kv heads (GQA), so that tp 2 splits every head count.
const std::string kModel =
    small_model_flags({.n_layers = 2}) + "--training.seq_len 32 --training.local_batch_size 2 ";
// titan_train's validation and titan_generate --eval over the same batches.
const int64_t kValSteps = 2, kValBatch = 2, kValSeq = 32;

struct Trained {
  std::string dir, step, hf, shards;
  double val_loss = 0;
  std::string masked_step;  // trained and validated under block_causal
  double masked_val_loss = 0;
};

// Trains once per test process: held-out shards (titan_tokenize over verses the run does not
// train on), 3 steps validating after step 3 and saving it, and its Hugging Face export.
const Trained& trained() {
  static const Trained t = [] {
    Trained r;
    r.dir = scratch_dir("generate") + "/" + std::to_string(getpid());
    fs::remove_all(r.dir);
    fs::create_directories(r.dir);
    {
      std::ifstream corpus(source_path("corpus/kjv.txt"), std::ios::binary);
      corpus.seekg(4000000);
      std::string held_out(6000, '\0');
      corpus.read(held_out.data(), static_cast<std::streamsize>(held_out.size()));
      std::ofstream(r.dir + "/held_out.txt", std::ios::binary) << held_out;
    }
    r.shards = r.dir + "/shards";
    const ProcessResult tokenize =
        run_process(binary_path("titan_tokenize") + " --threads 1 --shard-tokens 2500 " + r.dir +
                    "/held_out.txt " + r.shards);
    REQUIRE_MESSAGE(tokenize.exit_code == 0, tokenize.err);
    REQUIRE(fs::exists(r.shards + "/shard_00001.bin"));  // more than one shard
    const ProcessResult train = run_process(
        binary_path("titan_train") + " --config configs/debug_model.yaml " + kModel +
        "--training.steps 3 --metrics.log_freq 1 --metrics.jsonl " + r.dir + "/metrics.jsonl " +
        "--checkpoint.enable true --checkpoint.interval 3 --job.dump_folder " + r.dir + "/job " +
        "--validation.enable true --validation.freq 3 --validation.dataset_path " + r.shards +
        " --validation.steps " + std::to_string(kValSteps) + " --validation.local_batch_size " +
        std::to_string(kValBatch) + " --validation.seq_len " + std::to_string(kValSeq));
    REQUIRE_MESSAGE(train.exit_code == 0, train.err);
    r.step = r.dir + "/job/checkpoint/step-3";
    REQUIRE(fs::exists(r.step + "/metadata.json"));
    const auto lines = read_metrics_jsonl(r.dir + "/metrics.jsonl");
    REQUIRE(lines.size() == 3);
    REQUIRE(lines[2].count("val_loss") == 1);
    r.val_loss = lines[2].at("val_loss");
    // The same under block_causal: its own 3 steps, validation and checkpoint.
    const ProcessResult masked = run_process(
        binary_path("titan_train") + " --config configs/debug_model.yaml " + kModel +
        "--model.attention_mask block_causal --training.steps 3 --metrics.log_freq 1 "
        "--metrics.jsonl " +
        r.dir +
        "/masked.jsonl --checkpoint.enable true --checkpoint.interval 3 --job.dump_folder " +
        r.dir + "/masked --validation.enable true --validation.freq 3 --validation.dataset_path " +
        r.shards + " --validation.steps " + std::to_string(kValSteps) +
        " --validation.local_batch_size " + std::to_string(kValBatch) + " --validation.seq_len " +
        std::to_string(kValSeq));
    REQUIRE_MESSAGE(masked.exit_code == 0, masked.err);
    r.masked_step = r.dir + "/masked/checkpoint/step-3";
    const auto masked_lines = read_metrics_jsonl(r.dir + "/masked.jsonl");
    REQUIRE(masked_lines.size() == 3);
    r.masked_val_loss = masked_lines[2].at("val_loss");
    r.hf = r.dir + "/hf";
    const ProcessResult convert =
        run_process(binary_path("titan_convert") + " --checkpoint " + r.step + " --to-hf " + r.hf);
    REQUIRE_MESSAGE(convert.exit_code == 0, convert.err);
    return r;
  }();
  return t;
}

struct Record {
  std::string completion, finish_reason;
  std::vector<int32_t> prompt_ids, completion_ids;
};

std::vector<int32_t> ids_of(JsonValue value) {
  std::vector<int32_t> ids;
  const JsonArray array = *value.get_array();  // not a temporary's member: it must outlive the loop
  for (JsonValue id : array) ids.push_back(static_cast<int32_t>(*id.get_int64()));
  return ids;
}

// Runs `launcher` titan_generate with `args` (stdin empty), writing --jsonl, and reads it back.
std::vector<Record> generate(const std::string& args, const std::string& launcher = "") {
  static int runs = 0;
  const std::string jsonl = trained().dir + "/out" + std::to_string(runs++) + ".jsonl";
  const ProcessResult r = run_process(launcher + binary_path("titan_generate") + " " + args +
                                      " --jsonl " + jsonl + " < /dev/null");
  REQUIRE_MESSAGE(r.exit_code == 0, args, ": ", r.err);
  std::vector<Record> records;
  std::ifstream in(jsonl);
  std::string line;
  JsonDocument document;
  while (std::getline(in, line)) {
    REQUIRE(document.parse(line));
    const JsonObject o = *document.root().get_object();
    Record rec;
    rec.completion = std::string(*o.find("completion")->get_string());
    rec.finish_reason = std::string(*o.find("finish_reason")->get_string());
    rec.prompt_ids = ids_of(*o.find("prompt_ids"));
    rec.completion_ids = ids_of(*o.find("completion_ids"));
    records.push_back(rec);
  }
  return records;
}

std::vector<std::vector<int32_t>> completion_ids(const std::vector<Record>& records) {
  std::vector<std::vector<int32_t>> ids;
  for (const Record& r : records) ids.push_back(r.completion_ids);
  return ids;
}

const std::string kPrompts =
    "--prompt 'In the beginning' --prompt 'And God said' --prompt 'The LORD is my shepherd' ";

}  // namespace

TEST_SUITE("check") {
  TEST_CASE(
      "generate: --eval over the validation shards is titan_train's val_loss on the same weights "
      "and batches") {
    const Trained& t = trained();
    const std::string jsonl = t.dir + "/eval.jsonl";
    const ProcessResult r =
        run_process(binary_path("titan_generate") + " --model " + t.step + " --eval " + t.shards +
                    " --eval-steps " + std::to_string(kValSteps) + " --eval-batch-size " +
                    std::to_string(kValBatch) + " --eval-seq-len " + std::to_string(kValSeq) +
                    " --jsonl " + jsonl);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out.starts_with("eval "));
    JsonDocument document;
    REQUIRE(document.parse(read_file(jsonl)));
    const double loss = *(*(*document.root().get_object()).find("loss")).get_double();
    MESSAGE("titan_train val_loss after step 3: ", t.val_loss, "; titan_generate --eval: ", loss);
    CHECK(std::abs(loss - t.val_loss) <= 1e-9 * t.val_loss);
    // The Hugging Face export evaluates to the same loss.
    const ProcessResult hf =
        run_process(binary_path("titan_generate") + " --model " + t.hf + " --eval " + t.shards +
                    " --eval-steps " + std::to_string(kValSteps) + " --eval-batch-size " +
                    std::to_string(kValBatch) + " --eval-seq-len " + std::to_string(kValSeq) +
                    " --jsonl " + jsonl);
    REQUIRE_MESSAGE(hf.exit_code == 0, hf.err);
    REQUIRE(document.parse(read_file(jsonl)));
    CHECK(std::abs(*(*(*document.root().get_object()).find("loss")).get_double() - t.val_loss) <=
          1e-6 * t.val_loss);
    // A block_causal run's val_loss, and --eval of its checkpoint under the same mask.
    const ProcessResult masked = run_process(
        binary_path("titan_generate") + " --model " + t.masked_step + " --eval " + t.shards +
        " --eval-steps " + std::to_string(kValSteps) + " --eval-batch-size " +
        std::to_string(kValBatch) + " --eval-seq-len " + std::to_string(kValSeq) +
        " --eval-attention-mask block_causal --jsonl " + jsonl);
    REQUIRE_MESSAGE(masked.exit_code == 0, masked.err);
    REQUIRE(document.parse(read_file(jsonl)));
    const double masked_loss = *(*(*document.root().get_object()).find("loss")).get_double();
    MESSAGE("block_causal: titan_train val_loss ", t.masked_val_loss, "; titan_generate --eval ",
            masked_loss);
    CHECK(std::abs(masked_loss - t.masked_val_loss) <= 1e-9 * t.masked_val_loss);
  }

  TEST_CASE(
      "generate: a checkpoint and its Hugging Face export generate the same tokens — top-k 1 is "
      "greedy — a seed repeats — a stop text ends") {
    const Trained& t = trained();
    const std::string common = kPrompts + "--max-new-tokens 24 ";
    const std::vector<Record> greedy = generate("--model " + t.step + " " + common);
    REQUIRE(greedy.size() == 3);
    for (const Record& r : greedy) {
      CHECK(r.completion_ids.size() == 24);
      CHECK(r.finish_reason == "length");
      CHECK(r.prompt_ids.front() == 256);  // the byte tokenizer's BOS
    }
    CHECK(completion_ids(generate("--model " + t.hf + " " + common)) == completion_ids(greedy));
    CHECK(completion_ids(generate("--model " + t.step + " " + common +
                                  "--temperature 0.9 --top-k 1 --seed 3")) ==
          completion_ids(greedy));
    // Batching does not change a completion: one prompt per batch gives the same tokens.
    CHECK(completion_ids(generate("--model " + t.step + " " + common + "--batch-size 1")) ==
          completion_ids(greedy));

    const std::string sampled = common + "--temperature 1.0 --top-p 0.95 ";
    const std::vector<Record> seed7 = generate("--model " + t.step + " " + sampled + "--seed 7");
    CHECK(completion_ids(generate("--model " + t.step + " " + sampled + "--seed 7")) ==
          completion_ids(seed7));
    CHECK(completion_ids(generate("--model " + t.step + " " + sampled + "--seed 8")) !=
          completion_ids(seed7));
    CHECK(completion_ids(seed7) != completion_ids(greedy));

    // A stop text taken from the first greedy completion ends it right before its first
    // occurrence: two printable bytes (the byte tokenizer's ids are the bytes; a 3-step model
    // writes few of them), after the completion's first token.
    const std::vector<int32_t>& ids = greedy[0].completion_ids;
    auto plain = [](int32_t id) { return id >= 'A' && id <= 'z' && id != '\\' && id != '`'; };
    size_t at = 1;
    while (at + 1 < ids.size() && !(plain(ids[at]) && plain(ids[at + 1]))) ++at;
    REQUIRE_MESSAGE(at + 1 < ids.size(), "no two letters in a row to stop at");
    const std::string stop{static_cast<char>(ids[at]), static_cast<char>(ids[at + 1])};
    size_t first = 0;  // the stop's first occurrence (it may also start earlier than `at`)
    while (!(ids[first] == stop[0] && ids[first + 1] == stop[1])) ++first;
    const std::vector<Record> stopped =
        generate("--model " + t.step + " " + common + "--stop '" + stop + "'");
    CHECK(stopped[0].finish_reason == "stop");
    // Every token up to the one that completed the stop text; the text ends before it.
    CHECK(stopped[0].completion_ids ==
          std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<int64_t>(first) + 2));
    CHECK(stopped[0].completion.find(stop) == std::string::npos);
    CHECK(greedy[0].completion.starts_with(stopped[0].completion));

    // More new tokens than the sequence limit leaves: capped, with one line saying so, and the
    // completion ends where it and its prompt (BOS and 16 bytes) fill the limit.
    const std::string past = "--model " + t.step +
                             " --prompt 'In the beginning' --max-new-tokens 99999999999 "
                             "--max-seq-len 40";
    const ProcessResult capped =
        run_process(binary_path("titan_generate") + " " + past + " < /dev/null");
    REQUIRE_MESSAGE(capped.exit_code == 0, capped.err);
    CHECK(capped.err.find("titan_generate: warning: --max-new-tokens 99999999999 is more than the "
                          "39 new tokens a sequence limit of 40 positions (--max-seq-len) leaves "
                          "after a one-token prompt; capped at 39") != std::string::npos);
    const std::vector<Record> filled = generate(past);
    REQUIRE(filled.size() == 1);
    CHECK(filled[0].finish_reason == "context");
    CHECK(filled[0].prompt_ids.size() + filled[0].completion_ids.size() == 40);
  }
}

TEST_SUITE("check ranks=2") {
  TEST_CASE("generate mpi: tensor parallel over 2 ranks generates what one rank generates") {
    const Trained& t = trained();
    for (const std::string& sampling :
         {std::string(""), std::string("--temperature 0.8 --top-k 40 --seed 5 ")}) {
      const std::string args =
          "--model " + t.step + " " + kPrompts + "--max-new-tokens 24 " + sampling;
      const std::vector<Record> one = generate(args);
      const std::vector<Record> two = generate(args, mpirun_launcher(2));
      CHECK(completion_ids(two) == completion_ids(one));
    }
  }
}
