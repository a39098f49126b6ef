// The CUDA device query on a machine with a GPU: devices are listed with a compute capability
// this build supports (sm_75 is CUDA 13's oldest) and their memory, and titan_train
// --list-devices shows them.
#include <doctest/doctest.h>

#include "core/cuda/device_query.h"
#include "support/gpu.h"
#include "support/process.h"

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: the device query lists every visible device") {
    SKIP_WITHOUT_CUDA_DEVICE();
    titan::CudaQuery query = titan::query_cuda_devices();
    CHECK(titan::built_with_cuda());
    CHECK(query.runtime_version >= 13000);
    CHECK(query.driver_version >= query.runtime_version);
    for (const titan::CudaDeviceInfo& d : query.devices) {
      CAPTURE(d.name);
      CHECK(d.major * 10 + d.minor >= 75);
      CHECK(d.total_bytes > (int64_t{1} << 30));
      CHECK(d.multiprocessors > 0);
    }
    titan::testing::ProcessResult r =
        titan::testing::run_process(titan::testing::binary_path("titan_train") + " --list-devices");
    CHECK(r.exit_code == 0);
    CHECK(r.out.find(query.devices.front().name) != std::string::npos);
  }

}  // TEST_SUITE
