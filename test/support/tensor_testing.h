// Helpers for tests that compare tensors: seeded random fills and a comparison that reports,
// llm.c style, the max abs/rel error and the first mismatching pairs when it fails.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace titan::testing {

// Uniform in [-scale, scale), from the counter RNG: the same values on every machine.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0);
void fill_random(const Tensor& t, uint64_t seed, double scale = 1.0);

// The f32 values a bf16 copy of `x` holds: x rounded to bf16 (nearest even) and widened back.
// What a CPU oracle computes on when the GPU op reads bf16.
Tensor bf16_values(const Tensor& x);

// Token ids uniform in [0, vocab), as an i32 [B, S] batch.
Tensor random_tokens(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed);

// block_causal's doc_start [B, S] i32 (model/ops/attention/attention.h) of sequences made of
// documents of these lengths, each sequence's summing to S.
Tensor document_starts_of(const std::vector<std::vector<int64_t>>& lengths, int64_t seq_len);

// Any device and floating dtype (CUDA tensors are copied to the host first).
std::vector<double> to_doubles(const Tensor& t);

// ‖actual − expected‖₂ / ‖expected‖₂ over all elements (infinity if any is NaN): the GPU
// parity tests' measure. f32 kernels land far under 1e-5; bf16 storage near 4e-3.
double relative_l2_error(const Tensor& actual, const Tensor& expected);

struct Tolerance {
  double abs = 0;
  double rel = 0;
};

struct Comparison {
  bool ok = true;
  double max_abs = 0;
  double max_rel = 0;
  std::string report;  // empty when ok; otherwise the errors and the first mismatches
};

// |actual - expected| <= abs + rel·|expected| for every element.
Comparison compare(const Tensor& actual, const Tensor& expected, Tolerance tol,
                   const std::string& what);

// Bit-for-bit equality (same dtype, shape and bytes).
bool bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace titan::testing

// CHECK that two tensors agree, printing the report on failure.
#define CHECK_CLOSE_TENSORS(actual, expected, tol, what)                          \
  do {                                                                            \
    auto tt_cmp = ::titan::testing::compare((actual), (expected), (tol), (what)); \
    CHECK_MESSAGE(tt_cmp.ok, tt_cmp.report);                                      \
  } while (0)
