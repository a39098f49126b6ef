// titan_bench end to end on a machine without a GPU (CI's): a clear one-line error and exit
// code 2, never a crash or a hang. Its figures are measured on a GPU (docs/performance.md) and
// asserted nowhere: a benchmark is not a test.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/cuda/device_query.h"
#include "support/process.h"

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

    titan::CudaQuery query = titan::query_cuda_devices();
    if (query.devices.empty()) {
      ProcessResult r = titan::testing::run_process(bench);
      CHECK(r.exit_code == 2);
      CHECK(r.err_lines().size() == 1);
      CHECK(r.err.find("titan_bench: error: no CUDA device (" + query.why_none + ")") !=
            std::string::npos);
    }
  }

}  // TEST_SUITE
