// cuDNN is loaded at its first use (core/cuda/cudnn_library.cpp), not at start-up, and a
// machine without it is a reason the attention runs its native kernels, not an error. The
// graph layer's descriptors need no device, so their attributes are checked here too.
#include <cudnn_graph.h>
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "core/cuda/cudnn.h"
#include "core/cuda/cudnn_library.h"
#include "support/mapped_library.h"

TEST_SUITE("fast") {
  TEST_CASE("cuDNN: loaded at its first use and not at start-up") {
    REQUIRE_FALSE(titan::testing::library_mapped("libcudnn"));
    const titan::cuda::CudnnLibrary& lib = titan::cuda::cudnn_library();
    // The toolkit's own cuDNN is on the executables' RUNPATH on a build machine.
    INFO(lib.why_not);
    REQUIRE(lib.usable);
    CHECK(lib.version >= titan::cuda::kCudnnMinVersion);
    CHECK(titan::testing::library_mapped("libcudnn"));
    CHECK(cudnnGetVersion() == lib.version);
    CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED)) ==
          "CUDNN_STATUS_NOT_SUPPORTED");
    CHECK(titan::cuda::cudnn_version_text(91900) == "9.19.0");

    // A tensor descriptor, finalized on the host; a bad one names the attribute and cuDNN's
    // status.
    titan::cuda::CudnnGraph graph("host-side check");
    CHECK(graph.tensor("q", {1, 2, 3, 8}, {48, 8, 16, 1}, CUDNN_DATA_BFLOAT16) == 1);
    CHECK(graph.scalar("scale", 0.5f, 4) == 2);
    CHECK_THROWS_WITH(graph.tensor("bad", {1, 2, 3, 8}, {48, 8, 16}, CUDNN_DATA_BFLOAT16),
                      doctest::Contains("has dims [1, 2, 3, 8] but strides [48, 8, 16]"));
    const std::string text = graph.describe();
    CHECK(text.find("tensor 1 q: bf16 [1, 2, 3, 8] strides [48, 8, 16, 1] aligned 16") !=
          std::string::npos);
    CHECK(text.find("tensor 2 scale: f32 [1, 1, 1, 1] strides [1, 1, 1, 1] by value") !=
          std::string::npos);
  }

  TEST_CASE("cuDNN: a dependency that does not load is named") {
    const std::vector<std::string> deps = titan::cuda::cudnn_dependencies();
    REQUIRE(deps.size() == 3);
    CHECK(deps[0].rfind("libnvrtc.so.", 0) == 0);
    CHECK(titan::cuda::missing_cudnn_dependency(deps, [](const std::string&) { return true; })
              .empty());
    const std::string missing = titan::cuda::missing_cudnn_dependency(
        deps, [&](const std::string& name) { return name != deps[1]; });
    CHECK(missing.rfind(deps[1] + ", which its attention engines load, does not load", 0) == 0);
    CHECK(missing.find("LD_LIBRARY_PATH") != std::string::npos);
  }

  TEST_CASE("cuDNN: a library that is not there is a reason and not an error") {
    if (titan::testing::library_mapped("libcudnn")) {
      MESSAGE("libcudnn already loaded by an earlier case of this process; run this case alone");
      return;
    }
    const std::string empty_folder =
        (std::filesystem::temp_directory_path() / "titan_no_cudnn_here").string();
    std::filesystem::create_directories(empty_folder);
    REQUIRE(setenv("TITAN_CUDNN_LIBRARY", empty_folder.c_str(), 1) == 0);
    const titan::cuda::CudnnLibrary& lib = titan::cuda::cudnn_library();
    CHECK_FALSE(lib.usable);
    CHECK(lib.path == empty_folder + "/libcudnn.so.9");
    CHECK(lib.why_not.find("cannot load " + empty_folder + "/libcudnn.so.9") != std::string::npos);
    CHECK(lib.why_not.find("LD_LIBRARY_PATH or name it in TITAN_CUDNN_LIBRARY") !=
          std::string::npos);
    CHECK_THROWS_WITH(cudnnGetVersion(), doctest::Contains("cuDNN is not usable: cannot load"));
    CHECK_FALSE(titan::testing::library_mapped("libcudnn"));
    unsetenv("TITAN_CUDNN_LIBRARY");
  }
}
