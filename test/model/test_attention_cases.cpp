// The attention case table (support/attention_cases.h) on the CPU path: the tiled kernel in
// f32 against the plain twin in f64. The GPU backends run the same table under the gpu label
// (test/gpu/test_attention_cases.cpp).
#include <doctest/doctest.h>

#include "support/attention_cases.h"

TEST_SUITE("fast") {
  TEST_CASE("attention cases: the CPU path matches the f64 twin on every case") {
    titan::testing::check_attention_cases(titan::testing::cpu_attention_runner());
  }
}
