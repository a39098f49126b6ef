// titan_bench end to end on a machine without a GPU (CI's): a clear one-line error and exit
// code 2, never a crash or a hang. Its figures are measured on a GPU (docs/performance.md) and
// asserted nowhere: a benchmark is not a test.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/cuda/device_query.h"
#include "support/process.h"
#include "support/tool_refusal.h"

using titan::testing::ProcessResult;

TEST_SUITE("check") {
  TEST_CASE(
      "titan_bench refuses bad options and a machine without a CUDA device with exit code 2") {
    const std::string bench = titan::testing::binary_path("titan_bench");
    if (!titan::built_with_cuda()) {
      CHECK_FALSE(std::filesystem::exists(bench));  // only CUDA builds have a benchmark
      return;
    }
    ProcessResult bad = titan::testing::run_process(bench + " --only gemms");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--only: unknown bench 'gemms'") != std::string::npos);
    titan::testing::check_names_no_trainer_key("titan_bench", bad.err + bad.out);

    titan::CudaQuery query = titan::query_cuda_devices();
    if (query.devices.empty()) {
      ProcessResult r = titan::testing::run_process(bench);
      CHECK(r.exit_code == 2);
      CHECK(r.err_lines().size() == 1);
      CHECK(r.err.find("titan_bench: error: no CUDA device (" + query.why_none + ")") !=
            std::string::npos);
    }
  }

  TEST_CASE("titan_bench: every refusal names its own flags and none of titan_train's keys") {
    using titan::testing::check_tool_refused;
    if (!titan::built_with_cuda()) {
      CHECK_FALSE(std::filesystem::exists(titan::testing::binary_path("titan_bench")));
      return;
    }
    // The flags are checked before the device, so these hold with a GPU or without one.
    check_tool_refused("titan_bench", "--bogus", {"--bogus", "(see --help)"});
    check_tool_refused("titan_bench", "extra", {"extra", "(see --help)"});
    check_tool_refused("titan_bench", "--tokens abc", {"--tokens", "abc", "(see --help)"});
    check_tool_refused("titan_bench", "--only gemms", {"--only: unknown bench 'gemms'"});
    check_tool_refused("titan_bench", "--only ''", {"--only: names no bench"});
    check_tool_refused("titan_bench", "--tokens 100",
                       {"--tokens 100: give a positive multiple of 16"});
    check_tool_refused("titan_bench", "--tokens -16",
                       {"--tokens -16: give a positive multiple of 16"});
    check_tool_refused("titan_bench", "--repeats 0",
                       {"--repeats 0: give 1 or more timed runs per figure"});
    titan::CudaQuery query = titan::query_cuda_devices();
    if (query.devices.empty()) {
      check_tool_refused("titan_bench", "--only attention", {"no CUDA device ("});
      return;
    }
    // With a device: a --json that cannot be written is refused before anything is measured.
    check_tool_refused("titan_bench", "--only attention --json /nonexistent/figures.jsonl",
                       {"--json: cannot write '/nonexistent/figures.jsonl'"});
    const titan::CudaDeviceInfo& device = query.devices.front();
    if (device.major * 10 + device.minor < 90) {
      check_tool_refused(
          "titan_bench", "--only gemm",
          {"--only gemm: the FP8 GEMMs of every recipe need compute capability 9.0"});
    }
  }

}  // TEST_SUITE
