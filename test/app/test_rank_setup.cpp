// The process state titan_train sets before its mesh (app/rank_setup.h) and the shared process
// set-up it uses (parallel/process_setup.h): the communication timeout, the CPU device, the GPU
// refusal without one, and the GEMM threads from OPENBLAS_NUM_THREADS.
#include <doctest/doctest.h>
#include <stdlib.h>

#include "app/config.h"
#include "app/rank_setup.h"
#include "core/check.h"
#include "core/cuda/device_query.h"
#include "parallel/comm/mpi_watchdog.h"
#include "parallel/process_setup.h"

namespace titan::app {
namespace {

TEST_SUITE("fast") {
  TEST_CASE("rank setup: the CPU device and the job's communication timeout") {
    JobConfig c;
    c.parallelism.comm_timeout_s = 37;
    const RankDevice rank = set_up_rank(c, 0, 1);
    CHECK(rank.device.is_cpu());
    CHECK(parallel::comm_timeout() == 37);
  }

  TEST_CASE("rank setup: a GPU asked for where none is usable refuses naming the key") {
    if (!query_cuda_devices().devices.empty()) {
      MESSAGE("skipped: this machine has a usable GPU");
      return;
    }
    JobConfig c;
    c.training.device = parse_device_setting("cuda");
    CHECK_THROWS_WITH_AS(set_up_rank(c, 0, 1),
                         doctest::Contains("training.device: 'cuda' asked for a GPU but none is "
                                           "usable"),
                         InputError);
    CHECK_THROWS_WITH_AS(set_up_rank(c, 0, 1), doctest::Contains("use --training.device cpu"),
                         InputError);
    CHECK_THROWS_WITH_AS(parallel::choose_gpu(parse_device_setting("cuda:1"), 0, 1, "--device"),
                         doctest::Contains("--device: 'cuda:1' asked for a GPU but none is "
                                           "usable"),
                         InputError);
  }

  TEST_CASE("process setup: OPENBLAS_NUM_THREADS is the thread count or refused") {
    REQUIRE(setenv("OPENBLAS_NUM_THREADS", "3", 1) == 0);
    CHECK(parallel::configure_gemm_threads(4) == 3);
    REQUIRE(setenv("OPENBLAS_NUM_THREADS", "3x", 1) == 0);
    CHECK_THROWS_WITH_AS(parallel::configure_gemm_threads(4),
                         "OPENBLAS_NUM_THREADS: '3x' is not a positive number of threads; unset "
                         "it (each rank then uses its share of the node's cores) or write e.g. 2",
                         InputError);
    REQUIRE(unsetenv("OPENBLAS_NUM_THREADS") == 0);
    CHECK(parallel::configure_gemm_threads(1) >= 1);
  }
}

}  // namespace
}  // namespace titan::app
