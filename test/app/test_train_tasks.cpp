// eval.tasks end to end: multiple-choice tasks (test/fixtures/tasks/, every format) scored by
// titan_train during training. A run reports eval/<task>/acc and eval/<task>/acc_norm after
// step 1 and every eval.freq-th step, in its JSON lines and in TensorBoard (read back by
// test/app/read_tfevents.py, which shares no code with titan_train); one checkpoint scored on
// one rank, (1,2,2), tp 2, pp 2 (1F1B), cp 2 and dp_replicate 2 gives every choice's
// log-likelihood of titan_generate --tasks on one rank within 1e-5 relative, and the same acc
// and acc_norm; bad task files are refused before any training.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/metrics/metric_sinks.h"
#include "app/metrics/metrics_processor.h"
#include "core/allocator.h"
#include "core/json_reader.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/small_model.h"
#include "support/training_run.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

// Named, not anonymous: the unity build joins this file with others that have their own helpers.
namespace train_tasks_test {

const char* const kFormats[] = {"hellaswag", "arc", "piqa", "mmlu", "plain"};

// The fixture files, joined by `separator` (titan_train takes a comma-separated list).
std::string fixture_tasks(const std::string& separator) {
  std::string files;
  for (const char* f : kFormats) {
    if (!files.empty()) files += separator;
    files += source_path(std::string("test/fixtures/tasks/") + f + ".jsonl");
  }
  return files;
}

// "task:line" -> each choice's log-likelihood, from a --task-scores or eval.task_scores file.
std::map<std::string, std::vector<double>> read_scores(const std::string& path) {
  std::map<std::string, std::vector<double>> out;
  std::istringstream in(read_file(path));
  JsonDocument document;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    REQUIRE_MESSAGE(document.parse(line), line);
    const JsonObject o = *document.root().get_object();
    std::vector<double> logliks;
    for (JsonValue v : *o.find("loglik")->get_array()) logliks.push_back(*v.get_double());
    out[std::string(*o.find("task")->get_string()) + ":" +
        std::to_string(*o.find("line")->get_int64())] = logliks;
  }
  return out;
}

struct TaskTbScalar {
  int64_t step;
  std::string tag;
  double value;
};

// Every scalar of one event file, as the independent reader reads it.
std::vector<TaskTbScalar> read_event_scalars(const fs::path& file) {
  const ProcessResult r =
      run_process("/usr/bin/python3 test/app/read_tfevents.py " + file.string());
  REQUIRE_MESSAGE(r.exit_code == 0, file.string() << ": " << r.err);
  std::vector<TaskTbScalar> scalars;
  const std::regex scalar(R"re(^\{"step": (\d+), "tag": "([^"]+)", "value": ([^}]+)\}$)re");
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, scalar)) {
      scalars.push_back({std::stoll(m[1]), m[2], std::stod(m[3])});
    }
  }
  return scalars;
}

const std::string kTasksScratch = "train_tasks";

class TaskRecordingSink final : public app::MetricSink {
 public:
  explicit TaskRecordingSink(std::vector<app::StepReport>* reports) : reports_(reports) {}
  void write(const app::StepReport& report) override { reports_->push_back(report); }

 private:
  std::vector<app::StepReport>* reports_;
};

}  // namespace train_tasks_test

using namespace train_tasks_test;

TEST_SUITE("fast") {
  TEST_CASE("metrics: task scores join their step's report whatever log_freq and their time is no step's") {
    std::vector<app::StepReport> reports;
    std::vector<std::unique_ptr<app::MetricSink>> sinks;
    sinks.push_back(std::make_unique<TaskRecordingSink>(&reports));
    app::RunFacts facts;
    facts.tokens_per_step = 1000;
    facts.first_step = 1;
    facts.last_step = 10;
    facts.log_freq = 5;
    app::MetricsProcessor processor(
        facts, allocator_for(Device::cpu()), [](double v) { return v; }, std::move(sinks),
        /*logging_rank=*/false);
    processor.start();
    for (int64_t step = 1; step <= 10; ++step) {
      if (step == 3) {
        // A scoring that took the whole 60 ms of the window's wall time past step 2.
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        processor.set_task_scores(3, {{"eval/piqa/acc", 0.5}, {"eval/piqa/acc_norm", 1.0}}, 0.060);
      }
      processor.end_step(step, 10.0 - static_cast<double>(step), 1, 1e-3);
    }
    REQUIRE(reports.size() == 4);  // 1 (the first), 3 (scored), 5, 10 (the last)
    CHECK(reports[1].step == 3);
    REQUIRE(reports[1].find("eval/piqa/acc") != nullptr);
    CHECK(*reports[1].find("eval/piqa/acc") == 0.5);
    CHECK(*reports[1].find("eval/piqa/acc_norm") == 1.0);
    CHECK(*reports[1].find("eval_s") == 0.060);
    CHECK(reports[1].scalars.back().name == "eval_s");  // keys are only added, at the end
    for (size_t r : {0, 2, 3}) CHECK(reports[r].find("eval_s") == nullptr);
    CHECK(*reports[1].find("step_ms") < 25.0);  // the 60 ms are not step time
    CHECK(app::format_metrics_line(reports[1], 10).ends_with("  eval 0.06 s"));
  }
}

TEST_SUITE("check") {
  TEST_CASE("eval tasks in training: acc and acc_norm every eval.freq steps in the metrics and TensorBoard") {
    const std::string dump = scratch_dir(kTasksScratch) + "/every_freq";
    fs::remove_all(dump);
    const TrainingRun run = train_debug_model(
        kTasksScratch, "every_freq",
        small_model_flags({.n_layers = 2}) +
            "--training.seq_len 32 --training.local_batch_size 2 --training.steps 4 "
            "--eval.freq 2 --eval.batch_size 4 --eval.tasks " + fixture_tasks(",") +
            " --metrics.enable_tensorboard true --job.dump_folder " + dump);
    const std::vector<std::map<std::string, double>> lines =
        read_metrics_jsonl(scratch_dir(kTasksScratch) + "/every_freq.jsonl");
    REQUIRE(lines.size() == 4);
    // (step, tag) -> value: what the JSON lines say, for TensorBoard's to match.
    std::map<std::pair<int64_t, std::string>, double> want;
    for (const auto& line : lines) {
      const int64_t step = static_cast<int64_t>(line.at("step"));
      CAPTURE(step);
      const bool scored = step == 1 || step % 2 == 0;
      CHECK(line.contains("eval_s") == scored);
      for (const char* f : kFormats) {
        for (const char* metric : {"acc", "acc_norm"}) {
          const std::string key = std::string("eval/") + f + "/" + metric;
          CAPTURE(key);
          REQUIRE(line.contains(key) == scored);
          if (!scored) continue;
          const double value = line.at(key);
          // Two items a task: 0, 1/2 or 1.
          CHECK((value == 0.0 || value == 0.5 || value == 1.0));
          want[{step, key}] = value;
        }
      }
    }
    CHECK(want.size() == 3 * 5 * 2);
    // The step line says how long the scoring took.
    CHECK(std::regex_search(run.process.out + run.process.err,
                            std::regex(R"(step 4/4 .*  eval \d+\.\d\d s)")));
    CHECK((run.process.out + run.process.err).find("eval hellaswag: step 2, acc ") !=
          std::string::npos);

    std::vector<fs::path> events;
    for (const auto& entry : fs::recursive_directory_iterator(dump + "/tb")) {
      if (entry.path().filename().string().find("events.out.tfevents.") != std::string::npos) {
        events.push_back(entry.path());
      }
    }
    REQUIRE(events.size() == 1);
    std::map<std::pair<int64_t, std::string>, double> got;
    for (const TaskTbScalar& s : read_event_scalars(events.front())) {
      if (s.tag.starts_with("eval/")) got[{s.step, s.tag}] = s.value;
    }
    CHECK(got == want);  // 0, 1/2 and 1 are exact in float32
  }
}

TEST_SUITE("check ranks=4") {
  TEST_CASE("eval tasks on meshes: (1 2 2) and tp 2 and pp 2 and cp 2 and dp_replicate 2 score as one rank and as titan_generate") {
    const std::string dir = scratch_dir(kTasksScratch) + "/meshes_" + std::to_string(getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string model = small_model_flags({.n_layers = 2});
    const ProcessResult train = run_process(
        binary_path("titan_train") + " --config configs/debug_model.yaml " + model +
        "--training.seq_len 32 --training.local_batch_size 2 --training.steps 3 "
        "--checkpoint.enable true --checkpoint.interval 3 --job.dump_folder " + dir + "/job");
    REQUIRE_MESSAGE(train.exit_code == 0, train.err);
    const std::string step = dir + "/job/checkpoint/step-3";

    // titan_generate on one rank: the reference.
    const ProcessResult generate = run_process(
        binary_path("titan_generate") + " --model " + step + " --tasks " + fixture_tasks(" ") +
        " --eval-batch-size 3 --task-scores " + dir + "/generate.jsonl --jsonl " + dir +
        "/generate_tasks.jsonl");
    REQUIRE_MESSAGE(generate.exit_code == 0, generate.err);
    const std::map<std::string, std::vector<double>> want = read_scores(dir + "/generate.jsonl");
    REQUIRE(want.size() == 10);
    std::map<std::string, std::pair<double, double>> want_metrics;  // task -> acc, acc_norm
    {
      std::istringstream in(read_file(dir + "/generate_tasks.jsonl"));
      JsonDocument document;
      for (std::string line; std::getline(in, line);) {
        REQUIRE(document.parse(line));
        const JsonObject o = *document.root().get_object();
        want_metrics[std::string(*o.find("task")->get_string())] = {
            *o.find("acc")->get_double(), *o.find("acc_norm")->get_double()};
      }
    }

    // One step at a learning rate that leaves every f32 weight as loaded, then the scoring of
    // step 1: the checkpoint's weights on each mesh. 3 rows a batch: 30 choices make 10
    // batches, so dp 2 takes 5 each, and every batch's S is padded to the mesh's multiple.
    struct Mesh {
      const char* name;
      int ranks;
      const char* flags;
    };
    const Mesh meshes[] = {
        {"one_rank", 1, ""},
        {"dp_shard2_tp2", 4, "--parallelism.dp_shard 2 --parallelism.tp 2"},
        {"tp2", 2, "--parallelism.tp 2"},
        {"pp2_1f1b", 2,
         "--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule 1F1B "
         "--parallelism.pipeline_parallel_microbatch_size 1"},
        {"cp2", 2, "--parallelism.context_parallel_degree 2"},
        {"dp_replicate2", 2, "--parallelism.dp_replicate 2"},
    };
    for (const Mesh& mesh : meshes) {
      CAPTURE(mesh.name);
      const std::string scores = dir + "/" + mesh.name + "_scores.jsonl";
      const std::string metrics = dir + "/" + mesh.name + ".jsonl";
      const ProcessResult r = run_process(
          (mesh.ranks > 1 ? mpirun_launcher(mesh.ranks) : std::string()) +
          binary_path("titan_train") + " --config configs/debug_model.yaml " + model +
          "--training.seq_len 32 --training.local_batch_size 2 --training.global_batch_size 4 "
          "--training.steps 1 --optimizer.lr 1e-12 --checkpoint.initial_load_path " + step +
          " --job.dump_folder " + dir + "/" + mesh.name + " --eval.batch_size 3 --eval.tasks " +
          fixture_tasks(",") + " --eval.task_scores " + scores + " --metrics.jsonl " + metrics +
          " " + mesh.flags);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      const std::map<std::string, std::vector<double>> got = read_scores(scores);
      REQUIRE(got.size() == want.size());
      double worst = 0;
      for (const auto& [key, logliks] : want) {
        CAPTURE(key);
        REQUIRE(got.contains(key));
        REQUIRE(got.at(key).size() == logliks.size());
        for (size_t c = 0; c < logliks.size(); ++c) {
          const double rel = std::abs(got.at(key)[c] - logliks[c]) / std::abs(logliks[c]);
          worst = std::max(worst, rel);
          CHECK(rel <= 1e-5);
        }
      }
      MESSAGE(std::string(mesh.name) << ": worst relative log-likelihood difference " << worst);
      const std::vector<std::map<std::string, double>> lines = read_metrics_jsonl(metrics);
      REQUIRE(lines.size() == 1);
      for (const auto& [task, acc] : want_metrics) {
        CAPTURE(task);
        CHECK(lines[0].at("eval/" + task + "/acc") == acc.first);
        CHECK(lines[0].at("eval/" + task + "/acc_norm") == acc.second);
      }
    }
  }
}

TEST_SUITE("check") {
  TEST_CASE("eval tasks in training: bad task files are refused before any training") {
    check_train_rejected("--eval.tasks test/fixtures/tasks_bad/not_json.jsonl",
                         {"eval.tasks 'test/fixtures/tasks_bad/not_json.jsonl' line 2: not JSON"});
    check_train_rejected(
        "--eval.tasks piqa:test/fixtures/tasks_bad/label_out_of_range.jsonl",
        {"eval.tasks 'test/fixtures/tasks_bad/label_out_of_range.jsonl' line 1: field \"label\"",
         "5 is out of range: the item has 2 choices"});
    check_train_rejected("--eval.tasks absent_tasks.jsonl",
                         {"eval.tasks: cannot read 'absent_tasks.jsonl'"});
    check_train_rejected("--eval.tasks test/fixtures/tasks/piqa.jsonl --eval.num_fewshot 2",
                         {"eval.num_fewshot 2: 'test/fixtures/tasks/piqa.jsonl' has 2 items (within eval.limit)"});
    check_train_rejected("--eval.tasks test/fixtures/tasks/piqa.jsonl --eval.limit 0",
                         {"eval.limit: must be positive or -1 (every item), got 0"});
    check_train_rejected("--eval.tasks test/fixtures/tasks/piqa.jsonl --eval.freq 0",
                         {"eval.freq: must be positive, got 0"});
  }
}
