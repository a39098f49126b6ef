// The attention case table (support/attention_cases.h) on every GPU backend this build and
// device run: native always, cudnn and hopper where choose_attention_backend takes them. The
// CPU path runs the same table in the fast tier (test/model/test_attention_cases.cpp).
#include <doctest/doctest.h>

#include <cstdio>

#include "support/attention_cases.h"
#include "support/gpu.h"

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: every attention backend matches the f64 twin on every case") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const titan::testing::AttentionRunner& r : titan::testing::gpu_attention_runners()) {
      std::printf("-- attention cases on %s\n", r.name.c_str());
      titan::testing::check_attention_cases(r);
    }
  }
}
