// Seeing a run: a debug-model run on 4 ranks with TensorBoard, profiling and memory
// snapshots on, each output read back by a reader that shares no code with titan_train —
// test/app/read_tfevents.py (protobuf + CRC32C) for the event files, test/app/check_trace.py
// (Python's json) for the Chrome traces — and checked against metrics.jsonl: every scalar value
// for value, the spans of every phase on every rank, and a memory breakdown whose total is the
// peak the metrics lines report. Then running out of memory, and the bad inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/metrics/step_profiler.h"
#include "core/profiler.h"
#include "support/metrics_file.h"
#include "support/process.h"

using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> files_under(const fs::path& folder, const std::string& name_part) {
  std::vector<fs::path> found;
  if (!fs::exists(folder)) return found;
  for (const auto& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file() &&
        entry.path().filename().string().find(name_part) != std::string::npos) {
      found.push_back(entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The first match of `pattern`'s group 1 in `text`, or "".
std::string capture(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern)) ? m[1].str() : std::string();
}

struct TbScalar {
  int64_t step;
  std::string tag;
  double value;
};

// The scalars and texts read_tfevents.py found in one event file; the test stops if it failed.
std::vector<TbScalar> read_event_file(const fs::path& file, std::vector<std::string>* texts) {
  const ProcessResult r =
      run_process("/usr/bin/python3 test/app/read_tfevents.py " + file.string());
  REQUIRE_MESSAGE(r.exit_code == 0, file.string() << ": " << r.err);
  std::vector<TbScalar> scalars;
  const std::regex scalar(R"re(^\{"step": (\d+), "tag": "([^"]+)", "value": ([^}]+)\}$)re");
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, scalar)) {
      scalars.push_back({std::stoll(m[1]), m[2], std::stod(m[3])});
    } else if (line.find("\"text\"") != std::string::npos && texts != nullptr) {
      texts->push_back(line);
    }
  }
  return scalars;
}

const std::string kDump = "observability";

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "profiler schedule: the warmup steps before each traced window are recorded and then dropped") {
    const fs::path scratch = scratch_dir("profiler_warmup");
    const fs::path folder = scratch / "traces", resumed_folder = scratch / "resumed";
    fs::remove_all(folder);  // a trace of an earlier run would count below
    fs::remove_all(resumed_folder);
    // Windows of 5 steps: 1-2 untraced, 3-4 warmup, 5 traced; a run of 7 cuts the second short.
    titan::app::StepProfiler profiler(folder.string(),
                                      {.freq = 5, .warmup = 2, .active = 1, .last_step = 7},
                                      /*rank=*/0, /*on_cuda=*/false);
    using Phase = titan::app::StepProfiler::Phase;
    const Phase expected[] = {Phase::Idle,   Phase::Idle, Phase::Warmup, Phase::Warmup,
                              Phase::Traced, Phase::Idle, Phase::Idle};
    for (int64_t step = 1; step <= 7; ++step) {
      CAPTURE(step);
      CHECK(profiler.phase(step) == expected[step - 1]);
      profiler.begin_step(step);
      // Recording through the warmup, as torchtitan's profiler runs through its warmup steps.
      CHECK(titan::profiler::recording() == (expected[step - 1] != Phase::Idle));
      { TT_PROFILE_SPAN("step " + std::to_string(step), "step"); }
      profiler.end_step(step);
    }
    CHECK_FALSE(titan::profiler::recording());
    std::ifstream in(folder / "iteration_5" / "rank0_trace.json");
    REQUIRE(in.good());
    const std::string trace((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(trace.find("\"name\":\"step 5\"") != std::string::npos);
    for (const char* dropped : {"\"name\":\"step 3\"", "\"name\":\"step 4\""}) {
      CHECK_MESSAGE(trace.find(dropped) == std::string::npos, dropped);
    }
    CHECK(files_under(folder, "_trace.json").size() == 1);  // steps 6-7 trace nothing

    // A resumed run that starts inside a window's warmup warms up; inside its traced steps, traces.
    titan::app::StepProfiler resumed(
        resumed_folder.string(), {.freq = 5, .warmup = 2, .active = 2, .last_step = 10}, 0, false);
    CHECK(resumed.phase(2) == Phase::Warmup);
    CHECK(resumed.phase(4) == Phase::Traced);
    resumed.begin_step(4);
    CHECK(titan::profiler::recording());
    resumed.end_step(4);
    resumed.begin_step(5);
    resumed.end_step(5);
    CHECK(fs::exists(resumed_folder / "iteration_5" / "rank0_trace.json"));
    CHECK_FALSE(titan::profiler::recording());
  }
}

TEST_SUITE("check ranks=4 python") {
  TEST_CASE("4 ranks: TensorBoard files and traces and memory snapshots are read back independently") {
    const fs::path dump = scratch_dir(kDump) + "/run";
    fs::remove_all(dump);
    const std::string jsonl = (dump / "metrics.jsonl").string();
    const ProcessResult run = run_process(
        mpirun_launcher(4) + binary_path("titan_train") +
        " --config configs/debug_model.yaml --parallelism.dp_shard 2 --parallelism.tp 2"
        " --training.steps 6 --training.seq_len 64 --training.local_batch_size 2"
        " --metrics.log_freq 2 --metrics.jsonl " + jsonl +
        " --job.dump_folder " + dump.string() +
        " --metrics.enable_tensorboard true --metrics.save_for_all_ranks true"
        " --profiling.enable_profiling true --profiling.profile_freq 3"
        " --profiling.profiler_warmup 1 --profiling.enable_memory_snapshot true");
    REQUIRE_MESSAGE(run.exit_code == 0, run.err);
    const auto lines = read_metrics_jsonl(jsonl);
    REQUIRE(lines.size() == 4);  // steps 1 (the first), 2, 4, 6 (the last)
    CHECK(lines[3].at("step") == 6);
    CHECK(lines[3].at("eta_s") == 0);
    CHECK(lines[3].at("tokens") == 6 * 4 * 64);  // 2 sequences on each of 2 dp ranks

    SUBCASE("TensorBoard: every rank's event file, rank 0's value for value as metrics.jsonl") {
      for (int rank = 0; rank < 4; ++rank) {
        const auto files = files_under(dump / "tb" / ("rank_" + std::to_string(rank)),
                                       "events.out.tfevents.");
        CAPTURE(rank);
        REQUIRE(files.size() == 1);
        std::vector<std::string> texts;
        const std::vector<TbScalar> scalars = read_event_file(files[0], &texts);
        CHECK(texts.size() == 1);  // the config
        if (rank != 0) continue;
        REQUIRE(texts.size() == 1);
        CHECK(texts[0].find("enable_tensorboard: true") != std::string::npos);
        size_t expected = 0;
        for (const auto& line : lines) {
          const auto step = static_cast<int64_t>(line.at("step"));
          for (const auto& [key, value] : line) {
            if (key == "step") continue;
            ++expected;
            auto it = std::find_if(scalars.begin(), scalars.end(), [&](const TbScalar& s) {
              return s.step == step && s.tag == key;
            });
            CAPTURE(step);
            CAPTURE(key);
            REQUIRE(it != scalars.end());
            // TensorBoard keeps float32; metrics.jsonl has 9 significant digits of the double.
            CHECK(it->value == doctest::Approx(static_cast<float>(value)).epsilon(1e-7));
          }
        }
        CHECK(scalars.size() == expected);  // nothing TensorBoard has that metrics.jsonl lacks
      }
    }

    SUBCASE("traces: steps 3 and 6 on every rank, with the spans of every phase") {
      for (const char* iteration : {"iteration_3", "iteration_6"}) {
        for (int rank = 0; rank < 4; ++rank) {
          const fs::path trace = dump / "profile_traces" / iteration /
                                 ("rank" + std::to_string(rank) + "_trace.json");
          CAPTURE(trace.string());
          REQUIRE(fs::exists(trace));
          const ProcessResult r =
              run_process("/usr/bin/python3 test/app/check_trace.py " + trace.string());
          REQUIRE_MESSAGE(r.exit_code == 0, r.err);
          const std::string& summary = r.out;
          CHECK(summary.find("\"pids\": [" + std::to_string(rank) + "]") != std::string::npos);
          CHECK(summary.find("\"nesting_errors\": 0") != std::string::npos);
          const std::string step = iteration == std::string("iteration_3") ? "3" : "6";
          for (const std::string& name :
               {"step " + step, std::string("data.next_batch"), std::string("forward"),
                std::string("backward"), std::string("block.0.forward"),
                std::string("block.5.backward"), std::string("attention.forward"),
                std::string("attention.backward"), std::string("grad_norm"),
                std::string("optimizer")}) {
            CHECK_MESSAGE(summary.find("\"" + name + "\"") != std::string::npos, name);
          }
          // Each linear's GEMMs, and collectives with their mesh dims and bytes.
          CHECK(summary.find("layers.0.attention.wqkv") != std::string::npos);
          CHECK(summary.find("\"dims\": \"tp\"") != std::string::npos);
          CHECK(summary.find("\"dims\": \"dp_shard\"") != std::string::npos);
        }
      }
      CHECK(files_under(dump / "profile_traces", "_trace.json").size() == 8);
    }

    SUBCASE("memory: each rank's breakdown adds up, and the largest is the reported peak") {
      const auto snapshots = files_under(dump / "memory_snapshot", "_memory_snapshot.json");
      REQUIRE(snapshots.size() == 4);
      double largest = 0;
      for (const fs::path& file : snapshots) {
        const std::string json = read_file(file);
        CAPTURE(file.string());
        CHECK(capture(json, R"re("kind": "([a-z_]+)")re") == "peak");
        const double total = std::stod(capture(json, R"re("total_bytes": (\d+))re"));
        const std::string categories = capture(json, R"re("by_category": \{([^}]*)\})re");
        double sum = 0;
        const std::regex entry(R"re("([a-z_.0-9]+)": (\d+))re");
        std::set<std::string> names;
        for (std::sregex_iterator it(categories.begin(), categories.end(), entry), end;
             it != end; ++it) {
          sum += std::stod((*it)[2]);
          names.insert((*it)[1]);
        }
        CHECK(sum == total);
        for (const char* name : {"parameters", "gradients", "optimizer_state",
                                 "activations.block.0", "activations.block.5"}) {
          CHECK_MESSAGE(names.count(name) == 1, name);
        }
        largest = std::max(largest, total);
      }
      double reported = 0;
      for (const auto& line : lines) reported = std::max(reported, line.at("peak_mem_gib"));
      CHECK(largest / (1 << 30) == doctest::Approx(reported).epsilon(1e-8));
      CHECK(run.out.find("memory at the peak") != std::string::npos);
    }
  }
}

TEST_SUITE("check") {
  TEST_CASE("out of memory: the snapshot says what held the memory — then the run fails") {
    const fs::path dump = scratch_dir(kDump) + "/oom";
    fs::remove_all(dump);
    // Parameters, gradients and AdamW state are 94 MiB; step 1's activations do not fit in 120.
    const ProcessResult r = run_process(
        "TITAN_DEVICE_MEMORY_LIMIT_MB=120 " + binary_path("titan_train") +
        " --config configs/debug_model.yaml --training.steps 2 --job.dump_folder " +
        dump.string() + " --profiling.enable_memory_snapshot true");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("out of memory") != std::string::npos);
    const auto snapshots = files_under(dump / "memory_snapshot", "_memory_snapshot.json");
    REQUIRE(snapshots.size() == 1);
    CHECK(snapshots[0].parent_path().filename() == "iteration_1_exit");
    const std::string json = read_file(snapshots[0]);
    CHECK(json.find("\"kind\": \"out_of_memory\"") != std::string::npos);
    CHECK(json.find("\"optimizer_state\": ") != std::string::npos);
    CHECK(json.find("\"error\": \"out of memory") != std::string::npos);
    CHECK(std::stod(capture(json, R"re("total_bytes": (\d+))re")) <= 120.0 * (1 << 20));
  }

  TEST_CASE("bad outputs and schedules are refused before training — in one line") {
    const fs::path scratch = scratch_dir(kDump);
    const fs::path blocker = scratch / "a_file_not_a_folder";
    std::ofstream(blocker) << "x";
    struct Case {
      std::string flags;
      std::string names;
    };
    const std::vector<Case> cases = {
        {"--profiling.enable_profiling true --profiling.profile_freq 50",
         "profiling.profile_freq: 50 is beyond the run's 10 training.steps"},
        {"--profiling.profile_freq 4 --profiling.profiler_warmup 3 --profiling.profiler_active 2",
         "profiling.profiler_warmup: 3 + profiler_active 2 steps do not fit in profile_freq 4"},
        {"--metrics.enable_tensorboard true --job.dump_folder " + blocker.string(),
         "metrics.save_tb_folder"},
        {"--profiling.enable_profiling true --job.dump_folder " + blocker.string(),
         "profiling.save_traces_folder"},
        {"--profiling.enable_memory_snapshot true --job.dump_folder " + blocker.string(),
         "profiling.save_memory_snapshot_folder"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.flags);
      const ProcessResult r = run_process(binary_path("titan_train") +
                                          " --config configs/debug_model.yaml "
                                          "--training.steps 10 " + c.flags);
      CHECK(r.exit_code == 2);
      CHECK(r.error_lines() == 1);
      CHECK_MESSAGE(r.err.find(c.names) != std::string::npos, r.err);
      CHECK(r.out.find("step ") == std::string::npos);  // no step was trained
    }
  }
}
