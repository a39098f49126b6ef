// The NCCL watchdog (docs/architecture.md#decision-12), end to end: an NCCL operation that never
// completes ends the whole job within seconds of parallelism.comm_timeout_s, non-zero, with one
// line naming the operation, its mesh dim and the timeout. The operation runs in a helper
// (nccl_watchdog_probe) under mpirun, since the point is that the process dies: a collective's,
// and a pipeline message's on its own peer channel. And the NCCL
// backend's other loud failure: ranks sharing a GPU are refused up front, in config terms.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/cuda/device_query.h"
#include "support/gpu.h"
#include "support/process.h"

using namespace titan::testing;

namespace {

constexpr int kTimeoutS = 2;

struct Aborted {
  ProcessResult result;
  double seconds = 0;  // launch to exit, NCCL start-up included
};

// The probe sits beside this test, in the build tree and in a bundle of GPU binaries alike.
std::string probe_path() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "nccl_watchdog_probe")
      .string();
}

Aborted run_probe(const std::string& scenario, int ranks) {
  const auto start = std::chrono::steady_clock::now();
  // `timeout` bounds a watchdog that never fires: the probe would wait forever.
  ProcessResult result =
      run_process("timeout -s KILL 300 " + mpirun_launcher(ranks) + probe_path() + " " + scenario +
                  " " + std::to_string(kTimeoutS));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {result, seconds};
}

// The watchdog's line, and how long after the post it saw the timeout ("has not completed N s").
void check_aborted(const Aborted& run, const std::string& operation) {
  const ProcessResult& r = run.result;
  CAPTURE(r.err);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.exit_code != 3, "the probe outlived the timeout by 30 s: no abort");
  CHECK_MESSAGE(r.exit_code != 137, "the probe ran for 300 s: no abort");
  const std::string line = "error: NCCL watchdog: " + operation + " has not completed ";
  const size_t at = r.err.find(line);
  REQUIRE_MESSAGE(at != std::string::npos, "no watchdog line for " << operation);
  const int waited = std::atoi(r.err.c_str() + at + line.size());
  CHECK(waited >= kTimeoutS);
  CHECK_MESSAGE(waited <= kTimeoutS + 3,
                "the watchdog saw the timeout only after " << waited << " s");
  CHECK(r.err.find("(parallelism.comm_timeout_s: " + std::to_string(kTimeoutS) + ")") !=
        std::string::npos);
  CHECK(r.err.find("titan_train: rank 0: error: NCCL watchdog: ") != std::string::npos);
  MESSAGE("job ended " << run.seconds << " s after launch");
}

}  // namespace

TEST_SUITE("check gpu ranks=2") {
  TEST_CASE("nccl watchdog: a recv that no rank sends to ends the job naming recv and dp_shard" *
            doctest::test_suite("check gpu ranks=4")) {
    SKIP_WITHOUT_CUDA_DEVICE();
    check_aborted(run_probe("recv", 4), "recv from 1 on dp_shard (f32 × 4)");
  }

  TEST_CASE(
      "nccl watchdog: a pipeline recv that no rank sends to ends the job naming its channel") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // The receive is on pp 1→0's activations channel, a communicator the mesh made for it, on a
    // stream of its own: the watchdog watches it like any other.
    check_aborted(run_probe("pp_recv", 2), "recv from 1 on pp 1→0 activations (f32 × 4)");
  }

  TEST_CASE("nccl watchdog: an all_reduce behind a stalled stream ends a world of one") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // In a world of one every dim has degree 1: the mesh names the group "self".
    check_aborted(run_probe("stalled", 1), "all_reduce(Sum) on self (f32 × 4)");
  }

  TEST_CASE("nccl backend: two ranks on one GPU are refused with a line naming comm_backend mpi") {
    SKIP_WITHOUT_CUDA_DEVICE();
    if (titan::query_cuda_devices().devices.size() > 1) {
      MESSAGE("this machine has several GPUs: two ranks get one each, and nothing is shared");
      return;
    }
    // titan_train itself, as a user starts it: the refusal names the config key.
    ProcessResult r =
        run_process("timeout -s KILL 300 " + mpirun_launcher(2) + binary_path("titan_train") +
                    " --config configs/debug_model.yaml --training.steps 1 "
                    "--training.device cuda --parallelism.comm_backend nccl");
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("parallelism.comm_backend: nccl needs a GPU of its own for every rank, but "
                     "ranks 0 and 1 share cuda:0") != std::string::npos);
    CHECK(r.err.find("use parallelism.comm_backend: mpi to share GPUs") != std::string::npos);
  }
}
