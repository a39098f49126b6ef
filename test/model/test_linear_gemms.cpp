// The bf16 emulation of the high-precision GEMMs: operands rounded to bf16 (nearest even),
// fp32 accumulation — the same as rounding by hand and running the f32 GEMM.
#include <doctest/doctest.h>

#include "core/bf16.h"
#include "core/gemm.h"
#include "model/linear.h"
#include "support/tensor_testing.h"

using namespace titan;

namespace {

Tensor rounded_to_bf16(const Tensor& t) {
  Tensor r = t.clone();
  for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = round_to_bf16(r.data<float>()[i]);
  return r;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("bf16-emulated GEMMs equal f32 GEMMs of bf16-rounded operands") {
    Tensor x = testing::random_tensor({16, 24}, DType::F32, 1);
    Tensor w = testing::random_tensor({8, 24}, DType::F32, 2);
    Tensor dy = testing::random_tensor({16, 8}, DType::F32, 3);
    model::HighPrecisionGemms bf16(/*bf16_operands=*/true), f32;
    CHECK(bf16.name() == "bf16 (emulated)");

    Tensor y = Tensor::empty({16, 8}, DType::F32), expected = Tensor::empty({16, 8}, DType::F32);
    bf16.output(y, x, w);
    gemm(rounded_to_bf16(x), false, rounded_to_bf16(w), true, expected);
    CHECK(testing::bitwise_equal(y, expected));
    Tensor plain = Tensor::empty({16, 8}, DType::F32);
    f32.output(plain, x, w);
    CHECK_FALSE(testing::bitwise_equal(y, plain));  // the rounding is really there

    Tensor dx = Tensor::empty({16, 24}, DType::F32), expected_dx = Tensor::empty({16, 24}, DType::F32);
    bf16.grad_input(dx, dy, w);
    gemm(rounded_to_bf16(dy), false, rounded_to_bf16(w), false, expected_dx);
    CHECK(testing::bitwise_equal(dx, expected_dx));

    Tensor dw = Tensor::zeros({8, 24}, DType::F32), expected_dw = Tensor::zeros({8, 24}, DType::F32);
    bf16.grad_weight(dw, dy, x);
    gemm(rounded_to_bf16(dy), true, rounded_to_bf16(x), false, expected_dw, 1.0, 1.0);
    CHECK(testing::bitwise_equal(dw, expected_dw));
  }
}
