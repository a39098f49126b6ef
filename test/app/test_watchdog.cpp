// The MPI backend's watchdog (parallel/comm/mpi_watchdog.h), end to end under mpirun: a rank
// stopped with SIGSTOP, a rank stuck in a loop, a rank in a collective nobody else posts, and a
// rank frozen at its exit each end the job within parallelism.comm_timeout_s plus a few
// seconds, with one error line naming the collective, its mesh dims and the rank at fault.
// Without the watchdog every one of these jobs hangs forever.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "support/background_process.h"
#include "support/process.h"

namespace titan::testing {
namespace {

constexpr double kTimeout = 5;  // parallelism.comm_timeout_s of these jobs
// What the job may take beyond the timeout to end: the watchdog's questions to the other ranks
// (2 s when one cannot answer), leaving the report to a lower rank (5 s at most), MPI_Abort.
constexpr double kEndsWithin = kTimeout + 10;

struct EndedJob {
  int exit_code = -1;
  double seconds = 0;  // from the fault to the end
  std::string err;
  int watchdog_errors = 0;  // "titan_train: rank R: error: MPI watchdog:" lines
};

// `environment` is "" or "NAME=value": then sh execs mpirun itself, which stays in the test's
// session, where rank_process finds the ranks (a forked mpirun starts a session of its own).
std::string job_command(const std::string& environment, int steps) {
  return (environment.empty() ? "" : environment + " ") + mpirun_launcher(4) +
         binary_path("titan_train") +
         " --config configs/debug_model.yaml --training.seq_len 64 --training.local_batch_size 2"
         " --metrics.log_freq 1 --parallelism.tp 2 --training.steps " +
         std::to_string(steps) + " --parallelism.comm_timeout_s " + std::to_string(kTimeout);
}

int count_lines_with(const std::string& text, const std::string& part) {
  int count = 0;
  size_t at = 0;
  while ((at = text.find(part, at)) != std::string::npos) {
    ++count;
    at += part.size();
  }
  return count;
}

// What rank 0's metrics line shows once `step` of `steps` has ended: " 3/1000 (".
std::string progress(int step, int steps) {
  std::string text = " ";
  text += std::to_string(step) + "/" + std::to_string(steps) + " (";
  return text;
}

// Waits for the job to end (REQUIRE: within kEndsWithin of `fault`).
EndedJob wait_for_end(BackgroundProcess& job, std::chrono::steady_clock::time_point fault) {
  EndedJob ended;
  const std::optional<int> code = job.wait_for(kEndsWithin + 30);
  ended.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fault).count();
  REQUIRE_MESSAGE(code.has_value(),
                  "the job still ran " << ended.seconds << " s after the fault: " << job.err());
  ended.exit_code = *code;
  ended.err = job.err();
  ended.watchdog_errors = count_lines_with(ended.err, "error: MPI watchdog:");
  MESSAGE("the job ended " << ended.seconds << " s after the fault, with exit code "
                           << ended.exit_code);
  return ended;
}

// A job of mesh (1, 2, 2) with `fault` injected (TITAN_FAULT_INJECT), from its start.
EndedJob run_with_fault(const std::string& name, const std::string& fault, int steps = 1000) {
  BackgroundProcess job(job_command("TITAN_FAULT_INJECT=" + fault, steps),
                        scratch_dir("watchdog") + "/" + name);
  // The fault is at step 3: the job ends within kEndsWithin of the end of step 2.
  REQUIRE_MESSAGE(job.wait_for_output(progress(2, steps), 120), job.out() << job.err());
  return wait_for_end(job, std::chrono::steady_clock::now());
}

// What every faulted job here must do: fail, and end by itself within kEndsWithin of the fault.
void check_ended_in_time(const EndedJob& ended) {
  INFO(ended.err);
  CHECK(ended.exit_code != 0);
  CHECK(ended.seconds < kEndsWithin);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("check ranks=4") {
  TEST_CASE(
      "MPI watchdog: a rank stopped with SIGSTOP ends the job within the timeout naming the "
      "collective and the rank") {
    BackgroundProcess job(job_command("", 100000), scratch_dir("watchdog") + "/sigstop");
    REQUIRE_MESSAGE(job.wait_for_output(progress(3, 100000), 120), job.out() << job.err());
    const std::optional<pid_t> rank2 = job.rank_process("titan_train", 2);
    REQUIRE_MESSAGE(rank2.has_value(), job.processes_named("titan_train").size()
                                           << " titan_train processes in the session");
    const auto fault = std::chrono::steady_clock::now();
    REQUIRE(::kill(*rank2, SIGSTOP) == 0);
    const EndedJob ended = wait_for_end(job, fault);
    check_ended_in_time(ended);
    CHECK(ended.seconds >= kTimeout);  // it waited for the timeout, not less
    CAPTURE(ended.err);
    CHECK(ended.watchdog_errors == 1);  // reported once, by one rank
    // Which rank reports depends on who waited longest, but the line always says which
    // collective on which mesh dims, and that rank 2 had not arrived because it does not answer.
    CHECK(has(ended.err, "error: MPI watchdog: blocked "));
    CHECK(has(ended.err, "(parallelism.comm_timeout_s 5) on collective #"));
    CHECK(has(ended.err, "rank 2 (no answer: stopped (SIGSTOP, a debugger) or frozen)"));
    // The flight recorder: the last operations of the reporting rank, its sequence numbers,
    // ops, mesh dims and bytes.
    CHECK(has(ended.err, "MPI watchdog: the last 8 operations of rank "));
    CHECK(has(ended.err, ", waited for "));
  }

  TEST_CASE(
      "MPI watchdog: a stall is reported once when a lower rank times out a moment after a "
      "higher one") {
    // Rank 2 stops at step 3 and rank 0 reaches step 3's collectives 0.1 s after the others: a
    // higher rank times out first and asks, while rank 0 is still 0.1 s short of its timeout;
    // rank 0 fires while that rank waits 2 s for rank 2's answer. Both reported, 0.1 s apart,
    // when the asking rank judged rank 0 by its answer instead of by the end of the window.
    const EndedJob ended = run_with_fault("late_lower_rank", "2:3:stop,0:3:late");
    check_ended_in_time(ended);
    CAPTURE(ended.err);
    CHECK(ended.watchdog_errors == 1);
    CHECK(has(ended.err, "rank 2 (no answer: stopped (SIGSTOP, a debugger) or frozen)"));
  }

  TEST_CASE("MPI watchdog: a rank stuck in a loop outside communication is named as not arrived") {
    const EndedJob ended = run_with_fault("hang", "3:3:hang");
    check_ended_in_time(ended);
    CAPTURE(ended.err);
    CHECK(ended.watchdog_errors == 1);
    // Rank 3 is named as not arrived (when its group reports) or as the rank the others wait
    // for (when a rank of another group does): busy, not blocked, in either case.
    CHECK(has(ended.err, "rank 3 ("));
    CHECK(has(ended.err, "not blocked: busy outside communication since its last operation"));
  }

  TEST_CASE(
      "MPI watchdog: a rank in a collective the others never post is named with that collective") {
    const EndedJob ended = run_with_fault("extra_collective", "1:3:extra_collective");
    check_ended_in_time(ended);
    CAPTURE(ended.err);
    CHECK(ended.watchdog_errors == 1);
    // Whoever reports, rank 1 is shown inside the barrier on the world that only it posted.
    CHECK(has(ended.err, " on world: barrier (0 B)"));
    CHECK(has(ended.err, "MPI watchdog: the last 8 operations of rank 1, oldest first:"));
  }

  TEST_CASE("MPI watchdog: a rank frozen at its exit does not hold the others in MPI_Finalize") {
    // Rank 1 stops after the last step; the others finish and wait for it in MPI_Finalize,
    // where no collective of the program runs: the finalize guard ends them.
    BackgroundProcess job(job_command("TITAN_FAULT_INJECT=1:3:stop_after", 3),
                          scratch_dir("watchdog") + "/stop_at_exit");
    REQUIRE_MESSAGE(job.wait_for_output(progress(3, 3), 120), job.out() << job.err());
    const EndedJob ended = wait_for_end(job, std::chrono::steady_clock::now());
    check_ended_in_time(ended);
    CAPTURE(ended.err);
    CHECK(has(ended.err,
              "error: MPI_Finalize has not returned after 5 s "
              "(parallelism.comm_timeout_s): another rank is stopped or hung at its "
              "exit; ending this process"));
  }
}

}  // namespace titan::testing
