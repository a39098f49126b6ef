// core/unverified_gpu_paths.h: CUDA paths no GPU has run are taken only when named.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "core/unverified_gpu_paths.h"

namespace titan {

namespace {

// The tests' main allows every path (test/support/test_main.cpp); each case puts that back.
struct EveryPathAllowedAfter {
  ~EveryPathAllowedAfter() { allow_every_unverified_gpu_path(); }
};

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("unverified GPU paths: none is taken until named and all names every one") {
    EveryPathAllowedAfter restore;
    allow_unverified_gpu_paths({});
    for (const auto& entry : kUnverifiedGpuPaths.entries()) {
      CHECK_FALSE(unverified_gpu_path_allowed(entry.value));
    }
    CHECK(allowed_unverified_gpu_paths_text() == "none");

    const std::vector<std::string> two = {"device_init", "cudnn_under_auto"};
    allow_unverified_gpu_paths(parse_unverified_gpu_paths(two, "key"));
    CHECK(unverified_gpu_path_allowed(UnverifiedGpuPath::DeviceInit));
    CHECK(unverified_gpu_path_allowed(UnverifiedGpuPath::CudnnUnderAuto));
    CHECK_FALSE(unverified_gpu_path_allowed(UnverifiedGpuPath::FusedResidualNorm));
    CHECK(allowed_unverified_gpu_paths_text() == "cudnn_under_auto, device_init");

    const std::vector<std::string> all = {"all"};
    allow_unverified_gpu_paths(parse_unverified_gpu_paths(all, "key"));
    for (const auto& entry : kUnverifiedGpuPaths.entries()) {
      CHECK(unverified_gpu_path_allowed(entry.value));
    }
  }

  TEST_CASE("unverified GPU paths: an unknown name is refused with the names to use") {
    const std::vector<std::string> names = {"fused_residual_norm", "cudnn"};
    CHECK_THROWS_WITH_AS(parse_unverified_gpu_paths(names, "experimental.unverified_gpu_paths"),
                         "experimental.unverified_gpu_paths: unknown unverified GPU path "
                         "'cudnn'; use cudnn_under_auto, fused_residual_norm, "
                         "fp8_producer_quantize, device_init or all",
                         InputError);
  }
}

}  // namespace titan
