// The GEMM entry point (core/gemm.h) against a plain triple loop in double.
//
// The reference reads the operands' stored values, so the only difference it measures is the
// GEMM's own accumulation: f64 is held to 1e-12, f32 to 2e-5 abs + 1e-5 rel (K ≤ 65 terms of
// magnitude ≤ 1, float epsilon 6e-8). A wrong transpose, stride or alpha/beta is off by O(1).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "core/gemm.h"
#include "support/tensor_testing.h"

namespace titan {
namespace {

using testing::Tolerance;

Tolerance tolerance_for(DType dtype) {
  return dtype == DType::F64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-5, 1e-5};
}

// alpha · op(A) · op(B) + beta · C0, in double, from the tensors' stored values.
Tensor reference_gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      const Tensor& c0, double alpha, double beta) {
  std::vector<double> av = testing::to_doubles(a), bv = testing::to_doubles(b);
  std::vector<double> cv = testing::to_doubles(c0);
  int64_t m = c0.size(0), n = c0.size(1);
  int64_t k = transpose_a ? a.size(0) : a.size(1);
  int64_t a_cols = a.size(1), b_cols = b.size(1);
  Tensor out = Tensor::empty({m, n}, DType::F64);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) {
        double x = transpose_a ? av[l * a_cols + i] : av[i * a_cols + l];
        double y = transpose_b ? bv[j * b_cols + l] : bv[l * b_cols + j];
        sum += x * y;
      }
      out.data<double>()[i * n + j] = alpha * sum + beta * cv[i * n + j];
    }
  }
  return out;
}

Shape operand_shape(int64_t rows, int64_t cols, bool transpose) {
  return transpose ? Shape{cols, rows} : Shape{rows, cols};
}

void check_gemm_case(DType dtype, int64_t m, int64_t n, int64_t k, double alpha, double beta,
                     uint64_t seed) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Tensor a = testing::random_tensor(operand_shape(m, k, ta), dtype, seed);
      Tensor b = testing::random_tensor(operand_shape(k, n, tb), dtype, seed + 1);
      Tensor c = testing::random_tensor({m, n}, dtype, seed + 2);
      Tensor expected = reference_gemm(a, ta, b, tb, c, alpha, beta);
      gemm(a, ta, b, tb, c, alpha, beta);
      CHECK_CLOSE_TENSORS(c, expected, tolerance_for(dtype), "gemm");
    }
  }
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("gemm: all four transpose combinations match a triple loop in double") {
    for (DType dtype : {DType::F32, DType::F64}) {
      CAPTURE(dtype_name(dtype));
      check_gemm_case(dtype, 7, 5, 3, 1.0, 0.0, 10);  // C = A·B
      check_gemm_case(dtype, 33, 17, 65, 1.0, 0.0, 20);
      check_gemm_case(dtype, 33, 17, 65, 0.5, 1.0, 30);  // accumulate: C = 0.5·A·B + C
      check_gemm_case(dtype, 7, 5, 3, -2.0, 0.25, 40);
      check_gemm_case(dtype, 1, 1, 1, 1.0, 0.0, 50);  // degenerate: scalar, row, column
      check_gemm_case(dtype, 1, 9, 4, 1.0, 1.0, 60);
      check_gemm_case(dtype, 9, 1, 4, 1.0, 1.0, 70);
    }
  }

  TEST_CASE("gemm: beta = 0 ignores C's old contents even when NaN") {
    Tensor a = testing::random_tensor({4, 3}, DType::F32, 1);
    Tensor b = testing::random_tensor({3, 5}, DType::F32, 2);
    Tensor c = Tensor::empty({4, 5}, DType::F32);
    c.fill_(std::numeric_limits<double>::quiet_NaN());
    Tensor expected = reference_gemm(a, false, b, false, Tensor::zeros({4, 5}, DType::F32), 1, 0);
    gemm(a, false, b, false, c);
    CHECK_CLOSE_TENSORS(c, expected, tolerance_for(DType::F32), "gemm beta=0");
  }

  TEST_CASE("gemm: operands that are column blocks of wider matrices (row stride > cols)") {
    // As the K block inside a fused [T, 3·D] wqkv output: each operand is a narrow along dim 1.
    const int64_t m = 6, n = 5, k = 4;
    for (DType dtype : {DType::F32, DType::F64}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(ta);
          CAPTURE(tb);
          Shape a_shape = operand_shape(m, k, ta), b_shape = operand_shape(k, n, tb);
          Tensor a_wide = testing::random_tensor({a_shape[0], 3 * a_shape[1]}, dtype, 1);
          Tensor b_wide = testing::random_tensor({b_shape[0], 2 * b_shape[1] + 1}, dtype, 2);
          Tensor c_wide = testing::random_tensor({m, 3 * n}, dtype, 3);
          Tensor a = a_wide.narrow(1, a_shape[1], a_shape[1]);
          Tensor b = b_wide.narrow(1, b_shape[1] + 1, b_shape[1]);
          Tensor c = c_wide.narrow(1, n, n);
          REQUIRE(a.strides()[0] > a.size(1));
          REQUIRE_FALSE(c.is_contiguous());
          Tensor c_before = c_wide.clone();
          Tensor expected = reference_gemm(a, ta, b, tb, c.contiguous(), 1.5, 1.0);

          gemm(a, ta, b, tb, c, 1.5, 1.0);

          CHECK_CLOSE_TENSORS(c.contiguous(), expected, tolerance_for(dtype), "column block");
          // The columns of C outside the block are untouched.
          CHECK(testing::bitwise_equal(c_wide.narrow(1, 0, n), c_before.narrow(1, 0, n)));
          CHECK(testing::bitwise_equal(c_wide.narrow(1, 2 * n, n), c_before.narrow(1, 2 * n, n)));
        }
      }
    }
  }

  TEST_CASE("gemm: K = 0 leaves beta · C") {
    Tensor a = Tensor::zeros({3, 0}, DType::F64);
    Tensor b = Tensor::zeros({0, 4}, DType::F64);
    Tensor c = testing::random_tensor({3, 4}, DType::F64, 5);
    Tensor expected = reference_gemm(a, false, b, false, c, 1.0, 0.5);
    gemm(a, false, b, false, c, 1.0, 0.5);
    CHECK_CLOSE_TENSORS(c, expected, tolerance_for(DType::F64), "K = 0");
  }

  TEST_CASE("gemm: mismatched shapes or dtypes or ranks throw titan::Error") {
    Tensor a = Tensor::zeros({4, 3}, DType::F32);
    Tensor b = Tensor::zeros({3, 5}, DType::F32);
    Tensor c = Tensor::zeros({4, 5}, DType::F32);
    CHECK_NOTHROW(gemm(a, false, b, false, c));
    CHECK_THROWS_AS(gemm(a, true, b, false, c), Error);  // K: 4 vs 3
    CHECK_THROWS_AS(gemm(a, false, b, true, c), Error);  // K: 3 vs 5
    CHECK_THROWS_AS(gemm(a, false, b, false, Tensor::zeros({5, 4}, DType::F32)), Error);  // C
    CHECK_THROWS_AS(gemm(a, false, b, false, Tensor::zeros({4, 6}, DType::F32)), Error);
    CHECK_THROWS_AS(gemm(a, false, Tensor::zeros({3, 5}, DType::F64), false, c), Error);  // dtype
    CHECK_THROWS_AS(gemm(a.view({2, 2, 3}), false, b, false, c), Error);                  // 3-D
    Tensor ai = Tensor::zeros({4, 3}, DType::I32), bi = Tensor::zeros({3, 5}, DType::I32);
    CHECK_THROWS_AS(gemm(ai, false, bi, false, Tensor::zeros({4, 5}, DType::I32)), Error);
    CHECK_THROWS_WITH_AS(gemm(a, false, b, false, Tensor::zeros({4, 6}, DType::F32)),
                         doctest::Contains("does not fit C [4, 6]"), Error);
  }

  TEST_CASE("gemm_cpu: raw pointers with leading dimensions larger than the rows") {
    // A [2, 3] inside rows of 4, B [3, 2] inside rows of 3, C [2, 2] inside rows of 5.
    std::vector<double> a = {1, 2, 3, -1, 4, 5, 6, -1};
    std::vector<double> b = {1, 0, -1, 0, 1, -1, 1, 1, -1};
    std::vector<double> c(10, 7.0);
    gemm_cpu<double>(false, false, 2, 2, 3, 1.0, a.data(), 4, b.data(), 3, 0.0, c.data(), 5);
    // [[1,2,3],[4,5,6]] · [[1,0],[0,1],[1,1]] = [[4, 5], [10, 11]]
    CHECK(c[0] == 4);
    CHECK(c[1] == 5);
    CHECK(c[5] == 10);
    CHECK(c[6] == 11);
    for (int i : {2, 3, 4, 7, 8, 9}) CHECK(c[i] == 7.0);  // padding untouched
  }

  TEST_CASE("gemm_stats: counts calls and 2·M·N·K flops") {
    reset_gemm_stats();
    CHECK(gemm_stats().calls == 0);
    CHECK(gemm_stats().flops == 0);
    Tensor a = Tensor::zeros({7, 3}, DType::F32), b = Tensor::zeros({3, 5}, DType::F32);
    Tensor c = Tensor::zeros({7, 5}, DType::F32);
    gemm(a, false, b, false, c);
    CHECK(gemm_stats().calls == 1);
    CHECK(gemm_stats().flops == 2.0 * 7 * 5 * 3);
    Tensor a2 = Tensor::zeros({65, 33}, DType::F64), b2 = Tensor::zeros({17, 65}, DType::F64);
    Tensor c2 = Tensor::zeros({33, 17}, DType::F64);
    gemm(a2, true, b2, true, c2);  // M = 33, N = 17, K = 65
    GemmStats s = gemm_stats();
    CHECK(s.calls == 2);
    CHECK(s.flops == 2.0 * 7 * 5 * 3 + 2.0 * 33 * 17 * 65);
    CHECK(s.seconds >= 0.0);
    // A call that throws is not counted.
    CHECK_THROWS_AS(gemm(a, true, b, false, c), Error);
    CHECK(gemm_stats().calls == 2);
    reset_gemm_stats();
    CHECK(gemm_stats().calls == 0);
    CHECK(gemm_stats().flops == 0);
    CHECK(gemm_stats().seconds == 0);
  }

  TEST_CASE("gemv_rows: C = A · Bᵀ row by row matches the triple loop for strided operands") {
    for (DType dtype : {DType::F32, DType::F64}) {
      CAPTURE(dtype_name(dtype));
      for (int64_t m : {1, 3}) {
        // A as a column block of a wider matrix (a fused activation's slice); B whole.
        const Tensor wide = testing::random_tensor({m, 70}, dtype, 80 + m);
        const Tensor a = wide.narrow(1, 3, 65);
        const Tensor b = testing::random_tensor({17, 65}, dtype, 90 + m);
        Tensor c = Tensor::empty({m, 17}, dtype);
        c.fill_(std::numeric_limits<double>::quiet_NaN());  // C's old contents are ignored
        const Tensor expected =
            reference_gemm(a, false, b, true, Tensor::zeros({m, 17}, dtype), 1.0, 0.0);
        reset_gemm_stats();
        gemv_rows(a, b, c);
        CHECK_CLOSE_TENSORS(c, expected, tolerance_for(dtype), "gemv_rows");
        CHECK(gemm_stats().calls == 1);
        CHECK(gemm_stats().flops == 2.0 * static_cast<double>(m) * 17 * 65);
      }
    }
    const Tensor a = Tensor::zeros({2, 4}, DType::F32), b = Tensor::zeros({3, 5}, DType::F32);
    CHECK_THROWS_AS(gemv_rows(a, b, Tensor::zeros({2, 3}, DType::F32)), Error);
    CHECK_THROWS_AS(
        gemv_rows(a, Tensor::zeros({3, 4}, DType::F64), Tensor::zeros({2, 3}, DType::F32)), Error);
  }

}  // TEST_SUITE("fast")

}  // namespace titan
