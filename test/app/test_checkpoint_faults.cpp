// Checkpoints under the faults a cluster job meets: ranks killed at any moment of a save, and
// preemption signals.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "support/background_process.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

namespace titan::testing {
namespace {

namespace fs = std::filesystem;

// The newest step folder that a complete save left: step-N holding metadata.json (written last
// and renamed into place with its folder), found without titan_train's own reader.
std::optional<int64_t> newest_complete_step(const std::string& folder) {
  std::optional<int64_t> newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("step-")) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::exists(entry.path() / "metadata.json")) continue;
    const int64_t step = std::stoll(digits);
    if (!newest || step > *newest) newest = step;
  }
  return newest;
}

std::string train_command(const std::string& launcher, const std::string& dump,
                          const std::string& args) {
  return launcher + binary_path("titan_train") +
         " --config configs/debug_model.yaml --metrics.log_freq 1 --training.seq_len 64"
         " --training.local_batch_size 2 --checkpoint.enable true --checkpoint.interval 1"
         " --job.dump_folder " + dump + " " + args;
}

// `kills` runs of a 2-rank job that saves every step, each killed at a random moment (one rank,
// or the whole job at once); each restart must resume from exactly the newest complete
// checkpoint, and the last one must train on.
void check_killed_jobs_resume(int kills) {
  const std::string dump = scratch_dir("checkpoint_kills");
  fs::remove_all(dump);
  fs::create_directories(dump);
  const std::string folder = dump + "/checkpoint";
  std::mt19937 random(14);
  std::uniform_real_distribution<double> delay_s(0.2, 2.5);
  int resumes = 0;
  for (int kill = 0; kill < kills; ++kill) {
    const std::optional<int64_t> newest = newest_complete_step(folder);
    // Every save is a moment to be killed in: one per step, alternately synchronous and
    // asynchronous; keep_latest_k 2 also puts the pruning of old steps in harm's way.
    const std::string mode = kill % 2 == 0 ? "disabled" : "async";
    BackgroundProcess job(
        train_command(mpirun_launcher(2), dump,
                      "--training.steps 100000 --checkpoint.keep_latest_k 2"
                      " --checkpoint.async_mode " + mode),
        dump + "/run" + std::to_string(kill));
    const std::string started = newest ? "checkpoint: resumed from " : "checkpoint: none saved";
    REQUIRE_MESSAGE(job.wait_for_output(started, 60), "run " << kill << ": " << job.out()
                                                              << job.err());
    if (newest) {
      // Resumed from exactly the newest complete checkpoint, whatever was half written.
      CHECK_MESSAGE(job.out().find("resumed from " + folder + "/step-" +
                                   std::to_string(*newest) + " ") != std::string::npos,
                    "run " << kill << " should resume from step " << *newest << ": "
                           << job.out());
      ++resumes;
    }
    const double delay = delay_s(random);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    // Kill one rank, or the whole job at once (a node lost).
    const int victim = static_cast<int>(random() % 3);
    const std::vector<pid_t> ranks = job.processes_named("titan_train");
    INFO("run " << kill << ": SIGKILL after " << delay << " s to "
                << (victim == 2 ? "every process" : "rank pid " + std::to_string(victim)));
    if (victim == 2 || ranks.size() <= static_cast<size_t>(victim)) {
      job.kill_session(SIGKILL);
    } else {
      ::kill(ranks[static_cast<size_t>(victim)], SIGKILL);
    }
    // The job ends promptly: the other rank must not hang in a collective.
    const std::optional<int> code = job.wait_for(60);
    REQUIRE_MESSAGE(code.has_value(), "the job did not end after a rank was killed");
    CHECK(*code != 0);
  }
  // Most runs got far enough to save: the kills did land during training and saving.
  CHECK(resumes >= kills * 3 / 4);
  REQUIRE(newest_complete_step(folder).has_value());
  // The newest complete checkpoint still trains on: one more run to a near step.
  const int64_t last = *newest_complete_step(folder);
  const ProcessResult final_run = run_process(train_command(
      mpirun_launcher(2), dump,
      "--training.steps " + std::to_string(last + 2)));
  CHECK_MESSAGE(final_run.exit_code == 0, final_run.err);
}

}  // namespace

TEST_SUITE("check ranks=2") {
  TEST_CASE("a job killed at 6 random moments of its saves resumes each time from the newest complete checkpoint") {
    check_killed_jobs_resume(6);
  }

  TEST_CASE("SIGUSR1 to one rank of two stops both after one step: the step is saved and the job exits 75") {
    const std::string dump = scratch_dir("preemption");
    fs::remove_all(dump);
    fs::create_directories(dump);
    const std::string args = "--training.steps 40 --checkpoint.interval 1000";
    const TrainingRun straight =
        train_debug_model("preemption", "straight",
                          "--training.seq_len 64 --training.local_batch_size 2 "
                          "--training.steps 40",
                          mpirun_launcher(2));
    REQUIRE(straight.losses.size() == 40);

    BackgroundProcess job(train_command(mpirun_launcher(2), dump,
                                        args + " --metrics.jsonl " + dump + "/first.jsonl"),
                          dump + "/first");
    REQUIRE_MESSAGE(job.wait_for_output("step  3/40", 60), job.out() << job.err());
    const std::vector<pid_t> ranks = job.processes_named("titan_train");
    REQUIRE(ranks.size() == 2);
    ::kill(ranks[1], SIGUSR1);  // one rank only: the other learns it from the step's agreement
    const std::optional<int> code = job.wait_for(60);
    REQUIRE(code.has_value());
    CHECK_MESSAGE(*code == 75, job.out() << job.err());
    CHECK(job.out().find("preempted") != std::string::npos);
    const std::optional<int64_t> saved = newest_complete_step(dump + "/checkpoint");
    REQUIRE(saved.has_value());
    CHECK(*saved >= 3);
    CHECK(*saved < 40);

    // The resumed job continues as if never stopped: the same losses, bit for bit.
    const ProcessResult resumed = run_process(
        train_command(mpirun_launcher(2), dump, args + " --metrics.jsonl " + dump + "/second.jsonl"));
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.err);
    const std::vector<double> first = losses_of(read_metrics_jsonl(dump + "/first.jsonl"));
    const std::vector<double> second = losses_of(read_metrics_jsonl(dump + "/second.jsonl"));
    REQUIRE(first.size() == static_cast<size_t>(*saved));
    REQUIRE(first.size() + second.size() == 40);
    for (size_t i = 0; i < first.size(); ++i) CHECK(first[i] == straight.losses[i]);
    for (size_t i = 0; i < second.size(); ++i) {
      CHECK(second[i] == straight.losses[first.size() + i]);
    }
  }

  TEST_CASE("SIGTERM to a single rank saves the step in flight and exits 75") {
    const std::string dump = scratch_dir("preemption_sigterm");
    fs::remove_all(dump);
    fs::create_directories(dump);
    BackgroundProcess job(train_command("", dump, "--training.steps 400 --checkpoint.interval 1000"
                                                  " --checkpoint.async_mode async"),
                          dump + "/run");
    REQUIRE_MESSAGE(job.wait_for_output("step   2/400", 60), job.out() << job.err());
    const std::vector<pid_t> ranks = job.processes_named("titan_train");
    REQUIRE(ranks.size() == 1);
    ::kill(ranks[0], SIGTERM);
    const std::optional<int> code = job.wait_for(60);
    REQUIRE(code.has_value());
    CHECK_MESSAGE(*code == 75, job.out() << job.err());
    CHECK(job.out().find("preempted: ") != std::string::npos);
    const std::optional<int64_t> saved = newest_complete_step(dump + "/checkpoint");
    REQUIRE(saved.has_value());
    CHECK(*saved >= 2);
  }
}

TEST_SUITE("matrix ranks=2") {
  TEST_CASE("a job killed at 20 random moments of its saves resumes each time from the newest complete checkpoint") {
    check_killed_jobs_resume(20);
  }
}

}  // namespace titan::testing
