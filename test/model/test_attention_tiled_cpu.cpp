// The CPU's tiled attention (model/ops/attention/attention_tiled_cpu.h), which attention_forward
// and the block ops run on the CPU, against the plain twins that stay the oracle: every mask
// (causal, block_causal, the blocks of context parallelism: past, masked, all-gather's, future),
// MHA and GQA, head dims on and off the vector width, lengths off the tiles, f32 and f64, forward
// and backward; and the same bits for one thread and two.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_block.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;
using titan::testing::bitwise_equal;
using titan::testing::random_tensor;
using titan::testing::relative_l2_error;

namespace {

// f64: the two orders of summation agree to rounding; f32: to f32's.
double tolerance(DType dt) { return dt == DType::F64 ? 1e-12 : 2e-6; }

struct FullResult {
  Tensor out, lse, dqkv;
};

FullResult run_full(const AttentionShape& a, DType dt, const Tensor& doc, bool plain) {
  const int64_t T = a.batch * a.seq_len, row = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  const Tensor qkv = random_tensor({T, row}, dt, 11, 2.0);
  const Tensor dout = random_tensor({T, a.n_heads * a.head_dim}, dt, 12);
  FullResult r{Tensor::empty({T, a.n_heads * a.head_dim}, dt),
               Tensor::empty({a.batch, a.n_heads, a.seq_len}, dt), Tensor::empty({T, row}, dt)};
  if (plain) {
    attention_forward_plain(r.out, r.lse, qkv, a, doc);
    attention_backward_plain(r.dqkv, dout, qkv, r.out, r.lse, a, doc);
  } else {
    attention_forward(r.out, r.lse, qkv, a, doc);
    attention_backward(r.dqkv, dout, qkv, r.out, r.lse, a, doc);
  }
  return r;
}

void check_full(const AttentionShape& a, DType dt, const Tensor& doc = {}) {
  CAPTURE(a.batch);
  CAPTURE(a.seq_len);
  CAPTURE(a.n_heads);
  CAPTURE(a.n_kv_heads);
  CAPTURE(a.head_dim);
  CAPTURE(dtype_name(dt));
  CAPTURE(doc.defined());
  const FullResult plain = run_full(a, dt, doc, true), tiled = run_full(a, dt, doc, false);
  const double e_out = relative_l2_error(tiled.out, plain.out);
  const double e_lse = relative_l2_error(tiled.lse, plain.lse);
  const double e_d = relative_l2_error(tiled.dqkv, plain.dqkv);
  CHECK(e_out <= tolerance(dt));
  CHECK(e_lse <= tolerance(dt));
  CHECK(e_d <= tolerance(dt));
}

struct BlockResult {
  Tensor out, lse, dq, dkv;
};

// A block over q [B, S_q, H·Dh] and k, v columns of one [B, S_kv, 2·Hkv·Dh] buffer; the
// backward from the forward's out and lse, adding into accumulators that start non-zero.
BlockResult run_block(const AttentionBlockShape& a, DType dt, const Tensor& q_doc, bool plain) {
  const int64_t nq = a.n_heads * a.head_dim, nkv = a.n_kv_heads * a.head_dim;
  const Tensor q = random_tensor({a.batch, a.q_len, nq}, dt, 21, 2.0);
  const Tensor kv = random_tensor({a.batch, a.kv_len, 2 * nkv}, dt, 22, 2.0);
  const Tensor dout = random_tensor({a.batch, a.q_len, nq}, dt, 23);
  const Tensor k = kv.narrow(2, 0, nkv), v = kv.narrow(2, nkv, nkv);
  BlockResult r{Tensor::empty({a.batch, a.q_len, nq}, dt),
                Tensor::empty({a.batch, a.n_heads, a.q_len}, dt),
                random_tensor({a.batch, a.q_len, nq}, dt, 24),
                random_tensor({a.batch, a.kv_len, 2 * nkv}, dt, 25)};
  const Tensor dk = r.dkv.narrow(2, 0, nkv), dv = r.dkv.narrow(2, nkv, nkv);
  if (plain) {
    attention_block_forward_plain(r.out, r.lse, q, k, v, a, q_doc);
    attention_block_backward_plain(r.dq, dk, dv, dout, q, k, v, r.out, r.lse, a, q_doc);
  } else {
    attention_block_forward(r.out, r.lse, q, k, v, a, q_doc);
    attention_block_backward(r.dq, dk, dv, dout, q, k, v, r.out, r.lse, a, q_doc);
  }
  return r;
}

// lse with −inf (rows that saw no key) in the same places, the rest close.
void check_lse(const Tensor& tiled, const Tensor& plain, double tol) {
  const std::vector<double> t = testing::to_doubles(tiled), p = testing::to_doubles(plain);
  std::vector<double> tf, pf;
  for (size_t i = 0; i < t.size(); ++i) {
    REQUIRE(std::isinf(t[i]) == std::isinf(p[i]));
    if (std::isinf(t[i])) continue;
    tf.push_back(t[i]);
    pf.push_back(p[i]);
  }
  if (tf.empty()) return;
  CHECK(relative_l2_error(Tensor::from_vector(tf, {static_cast<int64_t>(tf.size())}),
                          Tensor::from_vector(pf, {static_cast<int64_t>(pf.size())})) <= tol);
}

void check_block(const AttentionBlockShape& a, DType dt, const Tensor& q_doc = {}) {
  CAPTURE(a.head_dim);
  CAPTURE(a.q_len);
  CAPTURE(a.q_pos);
  CAPTURE(a.kv_len);
  CAPTURE(a.kv_pos);
  CAPTURE(dtype_name(dt));
  CAPTURE(q_doc.defined());
  const BlockResult plain = run_block(a, dt, q_doc, true), tiled = run_block(a, dt, q_doc, false);
  CHECK(relative_l2_error(tiled.out, plain.out) <= tolerance(dt));
  check_lse(tiled.lse, plain.lse, tolerance(dt));
  CHECK(relative_l2_error(tiled.dq, plain.dq) <= tolerance(dt));
  CHECK(relative_l2_error(tiled.dkv, plain.dkv) <= tolerance(dt));
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("tiled CPU attention: the full op matches the plain twin on every shape and mask") {
    for (const DType dt : {DType::F64, DType::F32}) {
      // {B, S, H, Hkv, Dh}: the debug model's heads, GQA groups of 2 and 4, a length under one
      // query tile, lengths off both tiles, head dims under and over a vector.
      for (const AttentionShape& a : std::vector<AttentionShape>{{2, 96, 4, 4, 16},
                                                                 {1, 200, 8, 2, 64},
                                                                 {2, 17, 4, 1, 8},
                                                                 {1, 131, 2, 1, 128},
                                                                 {3, 64, 6, 3, 20}}) {
        check_full(a, dt);
        // block_causal: documents of 1 token, ones crossing tile edges, one long.
        std::vector<std::vector<int64_t>> lengths(static_cast<size_t>(a.batch));
        for (int64_t b = 0; b < a.batch; ++b) {
          int64_t left = a.seq_len;
          for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{5}, a.seq_len}) {
            const int64_t take = std::min(n + b, left);
            if (take > 0) lengths[static_cast<size_t>(b)].push_back(take);
            left -= take;
          }
        }
        check_full(a, dt, testing::document_starts_of(lengths, a.seq_len));
      }
    }
  }

  TEST_CASE("tiled CPU attention: context parallelism's blocks match the plain twin") {
    for (const DType dt : {DType::F64, DType::F32}) {
      // {B, H, Hkv, Dh, S_q, S_kv, q_pos, kv_pos}: the ring's diagonal, a past block (unmasked),
      // the all-gather's (causal to the last key), a masked block off the tile grid whose
      // first queries see no key, a future block (the merge's identity).
      for (const AttentionBlockShape& a :
           std::vector<AttentionBlockShape>{{2, 4, 2, 16, 64, 64, 128, 128},
                                            {1, 4, 4, 32, 70, 90, 200, 0},
                                            {2, 4, 1, 16, 48, 176, 128, 0},
                                            {1, 8, 2, 64, 100, 150, 50, 120},
                                            {1, 2, 1, 16, 40, 40, 0, 100}}) {
        check_block(a, dt);
        // block_causal: queries whose documents begin before the block, on it and after it.
        std::vector<int32_t> starts;
        for (int64_t b = 0; b < a.batch; ++b) {
          for (int64_t i = 0; i < a.q_len; ++i) {
            const int64_t pos = a.q_pos + i;
            const int64_t start = pos < a.q_pos + a.q_len / 3   ? a.kv_pos / 2
                                  : pos < a.q_pos + a.q_len / 2 ? a.q_pos + a.q_len / 3
                                                                : a.q_pos + a.q_len / 2;
            starts.push_back(static_cast<int32_t>(std::min(pos, start)));
          }
        }
        Tensor q_doc = Tensor::empty({a.batch, a.q_len}, DType::I32);
        std::copy(starts.begin(), starts.end(), q_doc.data<int32_t>());
        check_block(a, dt, q_doc);
      }
    }
  }

  TEST_CASE("tiled CPU attention: the same bits on one thread and on two") {
    const AttentionShape a{3, 150, 4, 2, 16};
    const Tensor doc = testing::document_starts_of({{50, 100}, {150}, {1, 149}}, a.seq_len);
    const int threads = cpu_threads();
    set_cpu_threads(1);
    const FullResult one = run_full(a, DType::F32, doc, false);
    set_cpu_threads(2);
    const FullResult two = run_full(a, DType::F32, doc, false);
    set_cpu_threads(threads);
    CHECK(bitwise_equal(one.out, two.out));
    CHECK(bitwise_equal(one.lse, two.lse));
    CHECK(bitwise_equal(one.dqkv, two.dqkv));
  }
}
