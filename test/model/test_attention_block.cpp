// Attention over one K/V block with its log-sum-exp (model/ops/attention/attention_block.h), on the
// CPU twin: the block's own gradients against finite differences, and the property context
// parallelism rests on: splitting the queries and the keys into blocks, attending block by block
// and merging by the log-sum-exp gives the full causal attention, forward and backward, whatever
// the cuts and the order of merging.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_block.h"
#include "support/gradcheck.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;
using titan::testing::GradCase;
using titan::testing::Tolerance;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max |a − b| / max |b| over the tensor: the "relative" of the bounds below.
double relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = testing::to_doubles(a), y = testing::to_doubles(b);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / std::max(scale, 1e-30);
}

struct Heads {
  int64_t B, S, H, Hkv, Dh;
  int64_t nq() const { return H * Dh; }
  int64_t nkv() const { return Hkv * Dh; }
  int64_t W() const { return (H + 2 * Hkv) * Dh; }
};

// Views of qkv [B·S, W] / out [B·S, H·Dh] / dkv [B·S, 2·Hkv·Dh] as [B, S, ·], rows [s, s + n).
Tensor rows3(const Tensor& t2d, const Heads& h, int64_t s, int64_t n, int64_t col, int64_t cols) {
  return t2d.view({h.B, h.S, t2d.size(1)}).narrow(1, s, n).narrow(2, col, cols);
}

AttentionBlockShape block_of(const Heads& h, int64_t qs, int64_t qe, int64_t ks, int64_t ke) {
  return {h.B, h.H, h.Hkv, h.Dh, qe - qs, ke - ks, qs, ks};
}

struct Result {
  Tensor out, lse, dqkv;
};

// Full causal attention of qkv through the blocks [q_cuts[i], q_cuts[i+1]) × [kv_cuts[j],
// kv_cuts[j+1]), future blocks skipped, kv blocks visited in `kv_order`; backward given dout.
Result blocked_attention(const Tensor& qkv, const Tensor& dout, const Heads& h,
                         const std::vector<int64_t>& q_cuts, const std::vector<int64_t>& kv_cuts,
                         bool reverse_kv) {
  const DType dt = qkv.dtype();
  Result r;
  r.out = Tensor::zeros({h.B * h.S, h.nq()}, dt);
  r.lse = Tensor::empty({h.B, h.H, h.S}, dt);
  r.lse.fill_(-kInf);
  std::vector<size_t> kv_blocks(kv_cuts.size() - 1);
  for (size_t j = 0; j < kv_blocks.size(); ++j) kv_blocks[j] = j;
  if (reverse_kv) std::reverse(kv_blocks.begin(), kv_blocks.end());
  auto for_each_block = [&](auto&& f) {
    for (size_t i = 0; i + 1 < q_cuts.size(); ++i) {
      for (size_t j : kv_blocks) {
        const AttentionBlockShape b =
            block_of(h, q_cuts[i], q_cuts[i + 1], kv_cuts[j], kv_cuts[j + 1]);
        if (kv_block_place(b) != KvBlockPlace::Future) f(b);
      }
    }
  };
  auto q = [&](const Tensor& t, const AttentionBlockShape& b) {
    return rows3(t, h, b.q_pos, b.q_len, 0, h.nq());
  };
  auto k = [&](const Tensor& t, const AttentionBlockShape& b, int64_t col) {
    return rows3(t, h, b.kv_pos, b.kv_len, col, h.nkv());
  };
  for_each_block([&](const AttentionBlockShape& b) {
    Tensor out_part = Tensor::empty({h.B, b.q_len, h.nq()}, dt);
    Tensor lse_part = Tensor::empty({h.B, h.H, b.q_len}, dt);
    attention_block_forward(out_part, lse_part, q(qkv, b), k(qkv, b, h.nq()),
                            k(qkv, b, h.nq() + h.nkv()), b);
    attention_lse_merge(q(r.out, b), r.lse.narrow(2, b.q_pos, b.q_len), out_part, lse_part);
  });
  Tensor dq = Tensor::zeros({h.B * h.S, h.nq()}, dt);
  Tensor dkv = Tensor::zeros({h.B * h.S, 2 * h.nkv()}, dt);
  for_each_block([&](const AttentionBlockShape& b) {
    attention_block_backward(q(dq, b), k(dkv, b, 0), k(dkv, b, h.nkv()), q(dout, b), q(qkv, b),
                             k(qkv, b, h.nq()), k(qkv, b, h.nq() + h.nkv()), q(r.out, b),
                             r.lse.narrow(2, b.q_pos, b.q_len), b);
  });
  r.dqkv = Tensor::empty({h.B * h.S, h.W()}, dt);
  attention_assemble_dqkv(r.dqkv, dq, dkv);
  return r;
}

Result full_attention(const Tensor& qkv, const Tensor& dout, const Heads& h) {
  Result r;
  r.out = Tensor::empty({h.B * h.S, h.nq()}, qkv.dtype());
  r.lse = Tensor::empty({h.B, h.H, h.S}, qkv.dtype());
  r.dqkv = Tensor::empty(qkv.shape(), qkv.dtype());
  const AttentionShape a{h.B, h.S, h.H, h.Hkv, h.Dh};
  attention_forward(r.out, r.lse, qkv, a);
  attention_backward(r.dqkv, dout, qkv, r.out, r.lse, a);
  return r;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("attention block: one block over the whole sequence is attention_forward bit for bit") {
    const Heads h{2, 7, 4, 2, 8};
    const Tensor qkv = testing::random_tensor({h.B * h.S, h.W()}, DType::F32, 31, 2.0);
    const Tensor dout = testing::random_tensor({h.B * h.S, h.nq()}, DType::F32, 32);
    const Result full = full_attention(qkv, dout, h);
    const Result one = blocked_attention(qkv, dout, h, {0, h.S}, {0, h.S}, false);
    CHECK(testing::bitwise_equal(one.out, full.out));
    CHECK(testing::bitwise_equal(one.lse, full.lse));
    // The backward accumulates (GEMMs with beta 1 onto zeros): equal to a rounding or two.
    CHECK(relative_error(one.dqkv, full.dqkv) < 1e-6);
  }

  TEST_CASE("attention block: K/V blocks merged by the log-sum-exp equal full attention in f32") {
    struct Layout {
      std::vector<int64_t> q, kv;
      bool reverse;
    };
    const int64_t S = 12;
    const std::vector<Layout> layouts = {
        {{0, 6, 12}, {0, 6, 12}, false},             // two equal chunks, as a cp ring cuts
        {{0, 3, 6, 9, 12}, {0, 3, 6, 9, 12}, true},  // four, merged last chunk first
        {{0, 4, 8, 12}, {0, 3, 7, 12}, false},       // cuts that never meet: every block masked
        {{0, 5, 12}, {0, 2, 3, 9, 12}, true},        // uneven, a one-row K/V block
        {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {0, 12}, false},  // one query per block
        {{0, 12}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, true},   // one key per block
    };
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {4, 1}}) {
      const Heads h{2, S, H, Hkv, 8};
      const Tensor qkv = testing::random_tensor({h.B * h.S, h.W()}, DType::F32, 41 + H * Hkv, 2.0);
      const Tensor dout = testing::random_tensor({h.B * h.S, h.nq()}, DType::F32, 42);
      const Result full = full_attention(qkv, dout, h);
      for (size_t i = 0; i < layouts.size(); ++i) {
        CAPTURE(H);
        CAPTURE(Hkv);
        CAPTURE(i);
        const Result blocked =
            blocked_attention(qkv, dout, h, layouts[i].q, layouts[i].kv, layouts[i].reverse);
        const double e_out = relative_error(blocked.out, full.out);
        const double e_lse = relative_error(blocked.lse, full.lse);
        const double e_dqkv = relative_error(blocked.dqkv, full.dqkv);
        MESSAGE("H " << H << " Hkv " << Hkv << " layout " << i << ": relative error out " << e_out
                     << ", lse " << e_lse << ", dqkv " << e_dqkv);
        CHECK(e_out < 1e-6);
        CHECK(e_lse < 1e-6);
        CHECK(e_dqkv < 1e-6);
      }
    }
  }

  TEST_CASE("attention block: forward and backward of a masked block match finite differences") {
    // Queries at positions 2..5 against keys 3..8: query 2 sees no key (out 0, lse −inf), query
    // 3 one, query 5 three; keys 6..8 are seen by none.
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {4, 1}}) {
      const AttentionBlockShape b{2, H, Hkv, 4, 4, 6, 2, 3};
      REQUIRE(kv_block_place(b) == KvBlockPlace::Masked);
      GradCase c;
      c.name = "attention block H" + std::to_string(H) + " Hkv" + std::to_string(Hkv);
      c.inputs = {testing::random_tensor({b.batch, b.q_len, H * b.head_dim}, DType::F64, 51),
                  testing::random_tensor({b.batch, b.kv_len, Hkv * b.head_dim}, DType::F64, 52),
                  testing::random_tensor({b.batch, b.kv_len, Hkv * b.head_dim}, DType::F64, 53)};
      c.checked = {true, true, true};
      auto forward = [b](const std::vector<Tensor>& in, Tensor& lse) {
        Tensor out = Tensor::empty(in[0].shape(), in[0].dtype());
        lse = Tensor::empty({b.batch, b.n_heads, b.q_len}, in[0].dtype());
        attention_block_forward(out, lse, in[0], in[1], in[2], b);
        return out;
      };
      c.forward = [forward](const std::vector<Tensor>& in) {
        Tensor lse;
        return forward(in, lse);
      };
      c.backward = [forward, b](const std::vector<Tensor>& in, const Tensor& dout) {
        Tensor lse;
        const Tensor out = forward(in, lse);
        std::vector<Tensor> grads;
        for (const Tensor& t : in) grads.push_back(Tensor::zeros(t.shape(), t.dtype()));
        attention_block_backward(grads[0], grads[1], grads[2], dout, in[0], in[1], in[2], out, lse,
                                 b);
        return grads;
      };
      for (DType dtype : {DType::F64, DType::F32}) {
        CAPTURE(dtype_name(dtype));
        const testing::GradCheckResult r =
            testing::check_gradients(c, dtype, testing::gradient_tolerance(dtype));
        MESSAGE(c.name << " (" << dtype_name(dtype) << "): max abs err " << r.max_abs
                       << ", max rel err " << r.max_rel);
      }
    }
  }

  TEST_CASE("attention block: a row that sees no key is the identity of the merge") {
    // Queries at 0..2, keys at 2..4: queries 0 and 1 see nothing, query 2 sees key 0 alone.
    const AttentionBlockShape b{1, 2, 1, 4, 3, 3, 0, 2};
    const Tensor q = testing::random_tensor({1, 3, 8}, DType::F64, 61);
    const Tensor kv = testing::random_tensor({1, 3, 4}, DType::F64, 62);
    Tensor out = Tensor::empty({1, 3, 8}, DType::F64), lse = Tensor::empty({1, 2, 3}, DType::F64);
    out.fill_(7.0);
    attention_block_forward(out, lse, q, kv, kv, b);
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(lse.data<double>()[h * 3 + 0] == -kInf);
      CHECK(lse.data<double>()[h * 3 + 1] == -kInf);
      CHECK(std::isfinite(lse.data<double>()[h * 3 + 2]));
      for (int64_t e = 0; e < 4; ++e) {
        CHECK(out.data<double>()[0 * 8 + h * 4 + e] == 0.0);
        CHECK(out.data<double>()[1 * 8 + h * 4 + e] == 0.0);
        CHECK(out.data<double>()[2 * 8 + h * 4 + e] == doctest::Approx(kv.data<double>()[e]));
      }
    }
    // Merged into a running result: rows 0 and 1 keep it bit for bit, and a running result of
    // nothing (0, −inf) takes the block's rows bit for bit.
    const Tensor run_out = testing::random_tensor({1, 3, 8}, DType::F64, 63);
    const Tensor run_lse = testing::random_tensor({1, 2, 3}, DType::F64, 64);
    Tensor merged_out = run_out.clone(), merged_lse = run_lse.clone();
    attention_lse_merge(merged_out, merged_lse, out, lse);
    CHECK(testing::bitwise_equal(merged_out.rows(0, 1).narrow(1, 0, 2).contiguous(),
                                 run_out.rows(0, 1).narrow(1, 0, 2).contiguous()));
    Tensor empty_out = Tensor::zeros({1, 3, 8}, DType::F64);
    Tensor empty_lse = Tensor::empty({1, 2, 3}, DType::F64);
    empty_lse.fill_(-kInf);
    attention_lse_merge(empty_out, empty_lse, out, lse);
    CHECK(testing::bitwise_equal(empty_out, out));
    CHECK(testing::bitwise_equal(empty_lse, lse));
  }

  TEST_CASE("attention block: where the keys sit decides past or masked or future") {
    auto place = [](int64_t q_pos, int64_t q_len, int64_t kv_pos, int64_t kv_len) {
      return kv_block_place({1, 1, 1, 4, q_len, kv_len, q_pos, kv_pos});
    };
    CHECK(place(8, 4, 0, 4) == KvBlockPlace::Past);
    CHECK(place(8, 4, 5, 4) == KvBlockPlace::Past);     // last key 8 = first query
    CHECK(place(8, 4, 6, 4) == KvBlockPlace::Masked);   // key 9 after query 8
    CHECK(place(8, 4, 8, 4) == KvBlockPlace::Masked);   // the diagonal
    CHECK(place(8, 4, 11, 4) == KvBlockPlace::Masked);  // key 11 = last query
    CHECK(place(8, 4, 12, 4) == KvBlockPlace::Future);
  }

  TEST_CASE("attention block: operands of the wrong shape or dtype are refused naming them") {
    const AttentionBlockShape b{1, 2, 2, 4, 3, 3, 0, 0};
    const Tensor q = Tensor::zeros({1, 3, 8}, DType::F32),
                 kv = Tensor::zeros({1, 3, 8}, DType::F32);
    Tensor out = Tensor::empty({1, 3, 8}, DType::F32), lse = Tensor::empty({1, 2, 3}, DType::F32);
    CHECK_THROWS_WITH_AS(attention_block_forward(out, lse, q, kv.narrow(2, 0, 4), kv, b),
                         doctest::Contains("k must be f32[1, 3, 8], got f32[1, 3, 4]"), Error);
    CHECK_THROWS_WITH_AS(
        attention_block_forward(out, lse, q, kv, Tensor::zeros({1, 3, 8}, DType::F64), b),
        doctest::Contains("v must be f32[1, 3, 8], got f64[1, 3, 8]"), Error);
    CHECK_THROWS_WITH_AS(attention_block_forward(out, lse.narrow(2, 0, 2), q, kv, kv, b),
                         doctest::Contains("lse must be f32[1, 2, 3]"), Error);
    CHECK_THROWS_WITH_AS(attention_block_forward(out, lse, q, kv, kv, {1, 3, 2, 4, 3, 3, 0, 0}),
                         doctest::Contains("bad block B 1, H 3, Hkv 2"), Error);
  }
}
