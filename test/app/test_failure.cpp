// Failure is loud and collective (docs/architecture.md#decision-12): a rank that fails in the
// middle of training ends the whole job within seconds with its own message — no rank is left
// waiting in a collective for it — and a rank killed outright (kill -9) makes mpirun exit non-zero
// promptly. And bad mesh input stops every rank with exit code 2 and one line.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/process.h"

using namespace titan::testing;

namespace {

const std::string kSmall =
    " --config configs/debug_model.yaml --training.seq_len 64 --metrics.log_freq 1 ";

double failure_seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_SUITE("fast ranks=4") {
  TEST_CASE("an exception on one rank aborts the whole job within seconds with its message") {
    // Rank 2 of (1, 2, 2) throws at step 3; its tp and dp_shard partners are then inside
    // collectives it will never join. 10 000 steps would take an hour if they waited.
    const auto start = std::chrono::steady_clock::now();
    ProcessResult r =
        run_process("TITAN_FAULT_INJECT=2:3 " + mpirun_launcher(4) + binary_path("titan_train") +
                    kSmall + "--training.steps 10000 --parallelism.tp 2");
    const double seconds = failure_seconds_since(start);
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(seconds < 60, "the job took " << seconds << " s to end");
    CHECK(r.err.find("titan_train: rank 2: error: injected fault (TITAN_FAULT_INJECT) at step 3") !=
          std::string::npos);
    MESSAGE("job ended " << seconds << " s after launch");
  }

  TEST_CASE("kill -9 of one rank makes mpirun exit non-zero promptly") {
    const std::string jsonl = scratch_dir("failure") + "/killed.jsonl";
    std::filesystem::remove(jsonl);
    const std::string binary = binary_path("titan_train");
    // Start a long job, wait for its first metrics line, kill one rank (not mpirun: the rank
    // processes are the ones whose command line starts with the binary), time mpirun's exit.
    const std::string script =
        mpirun_launcher(4) + binary + kSmall + "--training.steps 10000 --metrics.jsonl " + jsonl +
        " >/dev/null 2>&1 & job=$!\n"
        "for i in $(seq 600); do [ -s " +
        jsonl +
        " ] && break; sleep 0.1; done\n"
        "victim=$(pgrep -f '^" +
        binary + " .*" + jsonl +
        "' | tail -n 1)\n"
        "[ -n \"$victim\" ] || { echo 'no rank process found'; kill $job; exit 99; }\n"
        "kill -9 $victim; start=$(date +%s%N)\n"
        "wait $job; rc=$?\n"
        "echo \"rc $rc ms $(( ($(date +%s%N) - start) / 1000000 ))\"\n";
    const std::string script_path = scratch_dir("failure") + "/kill_one_rank.sh";
    { std::ofstream(script_path) << script; }
    ProcessResult r = run_process("bash " + script_path);
    REQUIRE_MESSAGE(r.exit_code == 0, r.out << r.err);
    int rc = -1;
    long ms = -1;
    REQUIRE(std::sscanf(r.out.c_str(), "rc %d ms %ld", &rc, &ms) == 2);
    CHECK(rc != 0);
    CHECK_MESSAGE(ms < 30000, "mpirun took " << ms << " ms to exit after the kill");
    MESSAGE("mpirun exited with " << rc << ", " << ms << " ms after kill -9 of one rank");
  }

  TEST_CASE(
      "a mesh whose product is not the world size fails with exit code 2 naming the factors") {
    ProcessResult r = run_process(mpirun_launcher(4) + binary_path("titan_train") + kSmall +
                                  "--training.steps 2 --parallelism.dp_replicate 3 "
                                  "--parallelism.dp_shard 1 --parallelism.tp 2");
    CHECK(r.exit_code == 2);
    CHECK(r.error_lines() == 1);
    CHECK(r.err.find("dp_replicate 3 × dp_shard 1 × tp 2 = 6 ranks, but the job has 4 ranks") !=
          std::string::npos);
  }

  TEST_CASE("a tp that does not divide the heads fails with exit code 2 naming both") {
    ProcessResult r = run_process(mpirun_launcher(3) + binary_path("titan_train") + kSmall +
                                  "--training.steps 2 --training.local_batch_size 3 "
                                  "--parallelism.tp 3");
    CHECK(r.exit_code == 2);
    CHECK(r.error_lines() == 1);
    CHECK(r.err.find("parallelism.tp: 3 does not divide the model's n_heads (16)") !=
          std::string::npos);
  }

  TEST_CASE("a rank whose config is unreadable fails set-up for every rank without a hang") {
    // MPMD launch: rank 0 gets a missing config, rank 1 a good one. Rank 1 must not wait alone
    // in the collective that creates the mesh: both agree after checking the config.
    const std::string good = binary_path("titan_train") + kSmall + "--training.steps 2";
    ProcessResult r = run_process(mpirun_launcher(1) + binary_path("titan_train") +
                                  " --config configs/missing.yaml : -np 1 " + good);
    CHECK_MESSAGE(r.exit_code == 2, "stdout: " << r.out << "\nstderr: " << r.err);
    CHECK_MESSAGE(r.error_lines() == 1, r.err);
    CHECK(r.err.find("configs/missing.yaml") != std::string::npos);
  }
}

TEST_SUITE("check ranks=2") {
  TEST_CASE("many lone processes started at once each start and leave no session folder behind") {
    // Started without a launcher, each process is an isolated Open MPI singleton; such
    // singletons once shared one session folder, which one finishing removed under another
    // starting (MPI_Init failed in about one start in twenty here). 150 starts, in waves of 15
    // a few milliseconds apart, with TMPDIR private so that what they leave is seen.
    const std::string tmp = scratch_dir("lone_processes") + "/tmp";
    std::filesystem::remove_all(tmp);
    std::filesystem::create_directories(tmp);
    const std::string one = "(TMPDIR=" + tmp + " " + binary_path("titan_train") +
                            " --config configs/debug_model.yaml --print-config > /dev/null 2>&1"
                            " || echo failed >> " + tmp + "/../failures) &";
    std::string waves = "rm -f " + tmp + "/../failures; for wave in $(seq 10); do for i in $(seq 15); do"
                        " sleep 0.00$((RANDOM % 10)); " + one + " done; sleep 0.3; done; wait";
    const ProcessResult r = run_process("bash -c '" + waves + "'");
    REQUIRE(r.exit_code == 0);
    CHECK_MESSAGE(read_file(tmp + "/../failures").empty(), "starts that failed: "
                                                                << read_file(tmp + "/../failures"));
    int left = 0;
    for (const auto& entry : std::filesystem::directory_iterator(tmp)) {
      MESSAGE("left behind: " << entry.path().string());
      ++left;
    }
    CHECK(left == 0);
  }
}
