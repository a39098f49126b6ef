// titan_generate --tasks end to end: each format's items (test/fixtures/tasks/) scored on a small
// model titan_train trains for 3 steps, held to PyTorch (test/app/task_reference.py, which builds
// the harness's prompts itself and runs a float64 forward over the Hugging Face export): every
// choice's summed log-likelihood within 1e-5 relative, and acc and acc_norm equal; batch sizes
// 1 and 5 give the same sums; --limit and the table. And a task built here from the King James
// Bible: the Quickstart's model (configs/debug_model.yaml, its 200 steps) scores above chance by
// 3 standard errors, its untrained start within 2 of chance.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/json_text.h"
#include "support/process.h"
#include "support/small_model.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

const char* const kFormats[] = {"hellaswag", "arc", "piqa", "mmlu", "plain"};

std::string fixture_tasks() {
  std::string files;
  for (const char* f : kFormats) {
    files += source_path(std::string("test/fixtures/tasks/") + f + ".jsonl") + " ";
  }
  return files;
}

// Each JSON line of `text`, parsed by `visit`.
template <class F>
void each_line(const std::string& text, F&& visit) {
  std::istringstream in(text);
  std::string line;
  JsonDocument document;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    REQUIRE_MESSAGE(document.parse(line), line);
    visit(*document.root().get_object());
  }
}

std::vector<double> doubles(JsonValue value) {
  std::vector<double> out;
  const JsonArray array = *value.get_array();
  for (JsonValue v : array) out.push_back(*v.get_double());
  return out;
}

struct Scores {
  std::map<std::string, std::vector<double>> loglik;  // "task:line" -> per choice
  std::map<std::string, std::pair<double, double>> metrics;  // task -> acc, acc_norm
};

// titan_generate --tasks `files` with `args`: its --task-scores and --jsonl read back.
Scores titan_scores(const std::string& model, const std::string& files, const std::string& args,
                    const std::string& dir, std::string* table = nullptr) {
  static int runs = 0;
  const std::string scores = dir + "/scores" + std::to_string(runs) + ".jsonl";
  const std::string jsonl = dir + "/tasks" + std::to_string(runs++) + ".jsonl";
  const ProcessResult r =
      run_process(binary_path("titan_generate") + " --model " + model + " --tasks " + files +
                  args + " --task-scores " + scores + " --jsonl " + jsonl);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  if (table) *table = r.out;
  Scores s;
  each_line(read_file(scores), [&](JsonObject o) {
    const std::string key = std::string(*o.find("task")->get_string()) + ":" +
                            std::to_string(*o.find("line")->get_int64());
    s.loglik[key] = doubles(*o.find("loglik"));
  });
  each_line(read_file(jsonl), [&](JsonObject o) {
    CHECK(o.find("commit").has_value());
    CHECK(o.find("model").has_value());
    s.metrics[std::string(*o.find("task")->get_string())] = {*o.find("acc")->get_double(),
                                                            *o.find("acc_norm")->get_double()};
  });
  return s;
}

// The verses of corpus/kjv.txt ("  12 And God said, …" under each chapter's heading) of 8 words
// or more.
std::vector<std::string> kjv_verses() {
  std::ifstream in(source_path("corpus/kjv.txt"));
  REQUIRE_MESSAGE(in, "corpus/kjv.txt is missing; scripts/setup.sh writes it");
  std::vector<std::string> verses;
  std::string line;
  while (std::getline(in, line)) {
    size_t i = 0;
    while (i < line.size() && line[i] == ' ') ++i;
    if (i == 0) continue;  // a heading or a blank line
    const size_t digits = i;
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
    if (i == digits || i >= line.size() || line[i] != ' ') continue;
    std::string verse = line.substr(i + 1);
    while (!verse.empty() && std::isspace(static_cast<unsigned char>(verse.back()))) {
      verse.pop_back();
    }
    if (std::count(verse.begin(), verse.end(), ' ') >= 7) verses.push_back(verse);
  }
  return verses;
}

// A verse cut at its middle byte (past any space there): the context ends inside a word.
std::pair<std::string, std::string> halves(const std::string& verse) {
  size_t h = verse.size() / 2;
  while (verse[h] == ' ') ++h;
  return {verse.substr(0, h), verse.substr(h)};
}

// Every (N / 400)th verse's first half, against its own second half and three second halves of
// the same byte length from verses 1000, 2000 and 3000 on: the same length, so that neither the
// sum nor the sum per byte can tell the answer by its length. The answer's place cycles 0..3.
std::string write_kjv_task(const std::string& path) {
  const std::vector<std::string> verses = kjv_verses();
  const size_t n = verses.size();
  REQUIRE(n > 4000);
  std::string out;
  int64_t items = 0;
  for (size_t i = 0; i < n; i += n / 400) {
    const auto [context, right] = halves(verses[i]);
    std::vector<std::string> choices;
    for (size_t k = 1; k <= 3; ++k) {
      size_t j = (i + 1000 * k) % n;
      while (halves(verses[j]).second.size() != right.size()) j = (j + 1) % n;
      choices.push_back(halves(verses[j]).second);
    }
    const int64_t label = items++ % 4;
    choices.insert(choices.begin() + label, right);
    out += "{\"context\": ";
    append_json_string(out, context);
    out += ", \"choices\": [";
    for (size_t c = 0; c < choices.size(); ++c) {
      if (c > 0) out += ", ";
      append_json_string(out, choices[c]);
    }
    out += "], \"label\": " + std::to_string(label) + "}\n";
  }
  REQUIRE(items >= 400);
  std::ofstream(path, std::ios::binary) << out;
  return path;
}

}  // namespace

TEST_SUITE("check") {
  TEST_CASE("tasks: the Quickstart's model picks King James verses' endings above chance") {
    const std::string dir = scratch_dir("tasks_kjv") + "/" + std::to_string(getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string task = write_kjv_task(dir + "/kjv_verses.jsonl");
    // The Quickstart's job (configs/debug_model.yaml: 200 steps) on one rank, and its start: one
    // step at a learning rate of 1e-10 leaves the initial weights as they were to ~1e-10.
    const std::string common = binary_path("titan_train") +
                               " --config configs/debug_model.yaml --checkpoint.enable true "
                               "--metrics.log_freq 50 --job.dump_folder ";
    const ProcessResult trained =
        run_process(common + dir + "/trained --checkpoint.interval 200");
    REQUIRE_MESSAGE(trained.exit_code == 0, trained.err);
    const ProcessResult untrained = run_process(
        common + dir + "/untrained --training.steps 1 --optimizer.lr 1e-10 --checkpoint.interval 1");
    REQUIRE_MESSAGE(untrained.exit_code == 0, untrained.err);
    auto score = [&](const std::string& step) {
      const std::string jsonl = dir + "/result.jsonl";
      const ProcessResult r = run_process(binary_path("titan_generate") + " --model " + step +
                                          " --tasks " + task + " --eval-batch-size 8 --jsonl " +
                                          jsonl);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      MESSAGE(step, ":\n", r.out, r.err);
      JsonDocument document;
      REQUIRE(document.parse(read_file(jsonl)));
      const JsonObject o = *document.root().get_object();
      // Every choice of an item has the same bytes: acc_norm is acc.
      CHECK(*o.find("acc_norm")->get_double() == *o.find("acc")->get_double());
      CHECK(*o.find("n")->get_int64() >= 400);
      return std::pair{*o.find("acc")->get_double(), *o.find("acc_stderr")->get_double()};
    };
    const auto [acc, stderr_trained] = score(dir + "/trained/checkpoint/step-200");
    const auto [chance, stderr_untrained] = score(dir + "/untrained/checkpoint/step-1");
    MESSAGE("trained: acc ", acc, " ± ", stderr_trained, "; untrained: ", chance, " ± ",
            stderr_untrained);
    CHECK(acc >= 0.25 + 3 * stderr_trained);
    CHECK(std::abs(chance - 0.25) <= 2 * stderr_untrained);
  }


  TEST_CASE("tasks: each choice's sum agrees with PyTorch's and so do acc and acc_norm") {
    const std::string dir = scratch_dir("tasks") + "/" + std::to_string(getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    const ProcessResult train = run_process(
        binary_path("titan_train") + " --config configs/debug_model.yaml " +
        small_model_flags({.n_layers = 2}) +
        "--training.seq_len 32 --training.local_batch_size 2 --training.steps 3 "
        "--checkpoint.enable true --checkpoint.interval 3 --job.dump_folder " +
        dir + "/job");
    REQUIRE_MESSAGE(train.exit_code == 0, train.err);
    const std::string step = dir + "/job/checkpoint/step-3";
    const ProcessResult convert =
        run_process(binary_path("titan_convert") + " --checkpoint " + step + " --to-hf " + dir +
                    "/hf");
    REQUIRE_MESSAGE(convert.exit_code == 0, convert.err);

    std::string table;
    const Scores ours = titan_scores(step, fixture_tasks(), " --eval-batch-size 5", dir, &table);
    CHECK(table.starts_with("task"));
    for (const char* f : kFormats) CHECK(table.find(std::string("\n") + f) != std::string::npos);

    const ProcessResult reference = run_process("/usr/bin/python3 test/app/task_reference.py " +
                                                dir + "/hf " + fixture_tasks());
    REQUIRE_MESSAGE(reference.exit_code == 0,
                    "task_reference.py failed (Debian's python3-torch and python3-numpy are "
                    "needed; scripts/setup.sh --tests installs them): "
                        << reference.err);
    Scores theirs;
    each_line(reference.out, [&](JsonObject o) {
      const std::string task(*o.find("task")->get_string());
      if (o.find("line")) {
        theirs.loglik[task + ":" + std::to_string(*o.find("line")->get_int64())] =
            doubles(*o.find("loglik"));
      } else {
        theirs.metrics[task] = {*o.find("acc")->get_double(), *o.find("acc_norm")->get_double()};
      }
    });
    REQUIRE(theirs.loglik.size() == ours.loglik.size());
    REQUIRE(theirs.loglik.size() == 10);
    double worst = 0;
    for (const auto& [key, sums] : theirs.loglik) {
      REQUIRE_MESSAGE(ours.loglik.count(key) == 1, key);
      const std::vector<double>& mine = ours.loglik.at(key);
      REQUIRE(mine.size() == sums.size());
      for (size_t c = 0; c < sums.size(); ++c) {
        const double rel = std::abs(mine[c] - sums[c]) / std::abs(sums[c]);
        worst = std::max(worst, rel);
        CHECK_MESSAGE(rel <= 1e-5, key, " choice ", c, ": titan ", mine[c], ", PyTorch ", sums[c]);
      }
    }
    MESSAGE("largest relative difference from PyTorch: ", worst);
    CHECK(theirs.metrics == ours.metrics);
    CHECK(theirs.metrics.size() == 5);

    // Batch-independent: one row per batch gives the same sums (to f32 rounding: a GEMM's order
    // of sums follows its shape) and the same choices.
    const Scores one = titan_scores(step, fixture_tasks(), " --eval-batch-size 1", dir);
    CHECK(one.metrics == ours.metrics);
    for (const auto& [key, sums] : one.loglik) {
      for (size_t c = 0; c < sums.size(); ++c) {
        CHECK(std::abs(sums[c] - ours.loglik.at(key)[c]) <= 1e-6 * std::abs(sums[c]));
      }
    }
    // --limit 1: the first item of each task.
    const Scores limited = titan_scores(step, fixture_tasks(), " --limit 1", dir);
    CHECK(limited.loglik.size() == 5);
    CHECK(limited.loglik.count("plain:1") == 1);
    CHECK(limited.loglik.count("plain:2") == 0);
  }
}
