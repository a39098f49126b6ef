// Block-causal attention (model.attention_mask block_causal, model/ops/attention/attention.h) on
// the CPU twin, the oracle: a window of several documents gives each document what it gets alone in
// a window of its own — the attention op bit for bit, and the whole model's loss and gradients in
// f64 — with grouped-query attention and without; one document per window is causal bit for bit;
// the op's gradients match finite differences; the block op of context parallelism, merged over any
// cut of the keys (blocks before every query's document skipped), equals it; and the hostile
// streams (no EOS at all, an EOS at every token, as data::document_starts finds them) give what the
// definition says.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_block.h"
#include "model/transformer.h"
#include "support/gradcheck.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

// Named, not anonymous: the tests of a binary compile in unity batches.
namespace attention_mask_test {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Heads {
  int64_t B, S, H, Hkv, Dh;
  int64_t nq() const { return H * Dh; }
  int64_t nkv() const { return Hkv * Dh; }
  int64_t W() const { return (H + 2 * Hkv) * Dh; }
};

Tensor doc_starts_of(const std::vector<std::vector<int64_t>>& lengths, int64_t S) {
  return testing::document_starts_of(lengths, S);
}

struct Result {
  Tensor out, lse, dqkv;
};

Result full_attention(const Tensor& qkv, const Tensor& dout, const Heads& h,
                      const Tensor& doc_start) {
  Result r;
  r.out = Tensor::empty({h.B * h.S, h.nq()}, qkv.dtype());
  r.lse = Tensor::empty({h.B, h.H, h.S}, qkv.dtype());
  r.dqkv = Tensor::empty(qkv.shape(), qkv.dtype());
  const AttentionShape a{h.B, h.S, h.H, h.Hkv, h.Dh};
  attention_forward(r.out, r.lse, qkv, a, doc_start);
  attention_backward(r.dqkv, dout, qkv, r.out, r.lse, a, doc_start);
  return r;
}

// Rows [s, s + n) of sequence b of a [B·S, ·] tensor, as its own [n, ·].
Tensor seq_rows(const Tensor& t, int64_t b, int64_t S, int64_t s, int64_t n) {
  return t.rows(b * S + s, b * S + s + n).contiguous();
}

// ‖a − b‖₂ / ‖b‖₂ (tensor_testing.h).
double relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return testing::relative_l2_error(a, b);
}

// The documents of the window test: a short one, one of a single token, two longer ones; a
// sequence that is one document (no EOS in the window); a document at every token.
const std::vector<std::vector<int64_t>> kDocuments = {
    {5, 1, 11, 7}, {24}, std::vector<int64_t>(24, 1)};
constexpr int64_t kWindow = 24;

// A small model whose documents the tests below pack into one window.
ModelArgs tiny_args(int64_t n_kv_heads) {
  return testing::small_model_args({.dim = 16,
                                    .n_layers = 2,
                                    .n_heads = 4,
                                    .n_kv_heads = n_kv_heads,
                                    .ffn_dim = 24,
                                    .vocab_size = 32});
}

struct ModelRun {
  double loss = 0;
  Tensor final_x;             // [T, D] the last block's output
  std::vector<Tensor> grads;  // every parameter's, in parameters() order
};

// forward (loss sum, gradient scale 1) and backward of one micro-batch from zeroed gradients.
ModelRun run_model(Transformer& model, const Tensor& tokens, const Tensor& targets,
                   const Tensor& doc_start) {
  ModelRun r;
  model.zero_grad();
  r.loss = model.forward(tokens, targets, 1.0, doc_start);
  PartActivations kept = model.take_activations();
  r.final_x = kept.final_x.clone();
  model.restore_activations(std::move(kept));
  model.backward();
  for (Parameter* p : model.parameters()) r.grads.push_back(p->grad.clone());
  return r;
}

TEST_SUITE("fast") {
  TEST_CASE(
      "block_causal attention: each document of a window gets its attention alone bit "
      "for bit") {
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}}) {
      for (DType dtype : {DType::F64, DType::F32}) {
        CAPTURE(H);
        CAPTURE(Hkv);
        CAPTURE(dtype_name(dtype));
        const Heads h{3, kWindow, H, Hkv, 8};
        const Tensor qkv = testing::random_tensor({h.B * h.S, h.W()}, dtype, 11 + Hkv, 2.0);
        const Tensor dout = testing::random_tensor({h.B * h.S, h.nq()}, dtype, 12);
        const Result packed = full_attention(qkv, dout, h, doc_starts_of(kDocuments, h.S));
        int64_t documents = 0;
        for (int64_t b = 0; b < h.B; ++b) {
          int64_t s = 0;
          for (int64_t n : kDocuments[static_cast<size_t>(b)]) {
            CAPTURE(b);
            CAPTURE(s);
            const Heads alone_h{1, n, H, Hkv, 8};
            const Result alone = full_attention(seq_rows(qkv, b, h.S, s, n),
                                                seq_rows(dout, b, h.S, s, n), alone_h, Tensor());
            CHECK(testing::bitwise_equal(seq_rows(packed.out, b, h.S, s, n), alone.out));
            CHECK(testing::bitwise_equal(seq_rows(packed.dqkv, b, h.S, s, n), alone.dqkv));
            const Tensor lse_rows = packed.lse.narrow(0, b, 1).narrow(2, s, n).contiguous();
            CHECK(testing::bitwise_equal(lse_rows, alone.lse));
            s += n;
            ++documents;
          }
        }
        CHECK(documents == 4 + 1 + 24);
      }
    }
  }

  TEST_CASE("block_causal attention: one document per sequence is causal bit for bit") {
    const Heads h{2, 13, 4, 2, 8};
    const Tensor qkv = testing::random_tensor({h.B * h.S, h.W()}, DType::F32, 21, 2.0);
    const Tensor dout = testing::random_tensor({h.B * h.S, h.nq()}, DType::F32, 22);
    const Result causal = full_attention(qkv, dout, h, Tensor());
    const Result one = full_attention(qkv, dout, h, Tensor::zeros({h.B, h.S}, DType::I32));
    CHECK(testing::bitwise_equal(one.out, causal.out));
    CHECK(testing::bitwise_equal(one.lse, causal.lse));
    CHECK(testing::bitwise_equal(one.dqkv, causal.dqkv));
  }

  TEST_CASE("block_causal attention: gradients match finite differences") {
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}}) {
      const Heads h{2, 9, H, Hkv, 4};
      const Tensor doc_start = doc_starts_of({{3, 1, 5}, {6, 3}}, h.S);
      const AttentionShape a{h.B, h.S, h.H, h.Hkv, h.Dh};
      testing::GradCase c;
      c.name = "block_causal attention H" + std::to_string(H) + " Hkv" + std::to_string(Hkv);
      c.inputs = {testing::random_tensor({h.B * h.S, h.W()}, DType::F64, 31)};
      c.checked = {true};
      c.forward = [&](const std::vector<Tensor>& in) {
        Tensor out = Tensor::empty({h.B * h.S, h.nq()}, in[0].dtype());
        Tensor lse = Tensor::empty({h.B, h.H, h.S}, in[0].dtype());
        attention_forward(out, lse, in[0], a, doc_start);
        return out;
      };
      c.backward = [&](const std::vector<Tensor>& in, const Tensor& dout) {
        Tensor out = Tensor::empty({h.B * h.S, h.nq()}, in[0].dtype());
        Tensor lse = Tensor::empty({h.B, h.H, h.S}, in[0].dtype());
        attention_forward(out, lse, in[0], a, doc_start);
        Tensor dqkv = Tensor::empty(in[0].shape(), in[0].dtype());
        attention_backward(dqkv, dout, in[0], out, lse, a, doc_start);
        return std::vector<Tensor>{dqkv};
      };
      // f64 to ~1e-9 of the central differences, f32 to float precision.
      const testing::GradCheckResult f64 =
          testing::check_gradients(c, DType::F64, testing::gradient_tolerance(DType::F64));
      const testing::GradCheckResult f32 =
          testing::check_gradients(c, DType::F32, testing::gradient_tolerance(DType::F32));
      MESSAGE(c.name << ": max rel err f64 " << f64.max_rel << ", f32 " << f32.max_rel);
    }
  }

  TEST_CASE(
      "block_causal attention block: K/V blocks merged equal the whole window with the blocks "
      "before every query's document skipped") {
    // Two sequences of 16: documents crossing the chunk cuts (4 and 8 and 12) and not.
    const Heads h{2, 16, 4, 2, 8};
    const Tensor doc_start = doc_starts_of({{3, 7, 1, 5}, {9, 7}}, h.S);
    const Tensor qkv = testing::random_tensor({h.B * h.S, h.W()}, DType::F32, 41, 2.0);
    const Tensor dout = testing::random_tensor({h.B * h.S, h.nq()}, DType::F32, 42);
    const Result full = full_attention(qkv, dout, h, doc_start);
    for (const std::vector<int64_t>& cuts :
         {std::vector<int64_t>{0, 4, 8, 12, 16}, {0, 8, 16}, {0, 3, 10, 11, 16}}) {
      CAPTURE(cuts.size());
      const DType dt = DType::F32;
      Tensor out = Tensor::zeros({h.B * h.S, h.nq()}, dt), lse = Tensor::empty({h.B, h.H, h.S}, dt);
      lse.fill_(-kInf);
      auto view = [&](const Tensor& t, int64_t s, int64_t n, int64_t col, int64_t cols) {
        return t.view({h.B, h.S, t.size(1)}).narrow(1, s, n).narrow(2, col, cols);
      };
      int64_t skipped = 0;
      auto for_each_block = [&](auto&& f) {
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          const int64_t qs = cuts[i], qn = cuts[i + 1] - cuts[i];
          int64_t least = qs;  // the least document start of these queries, over the batch
          for (int64_t b = 0; b < h.B; ++b) {
            least = std::min<int64_t>(least, doc_start.data<int32_t>()[b * h.S + qs]);
          }
          for (size_t j = 0; j + 1 < cuts.size(); ++j) {
            const AttentionBlockShape blk{h.B, h.H,    h.Hkv, h.Dh, qn, cuts[j + 1] - cuts[j],
                                          qs,  cuts[j]};
            if (kv_block_place(blk) == KvBlockPlace::Future) continue;
            if (kv_block_before_documents(blk, least)) {
              ++skipped;
              continue;
            }
            f(blk, doc_start.narrow(1, qs, qn));
          }
        }
      };
      for_each_block([&](const AttentionBlockShape& b, const Tensor& docs) {
        Tensor out_part = Tensor::empty({h.B, b.q_len, h.nq()}, dt);
        Tensor lse_part = Tensor::empty({h.B, h.H, b.q_len}, dt);
        attention_block_forward(out_part, lse_part, view(qkv, b.q_pos, b.q_len, 0, h.nq()),
                                view(qkv, b.kv_pos, b.kv_len, h.nq(), h.nkv()),
                                view(qkv, b.kv_pos, b.kv_len, h.nq() + h.nkv(), h.nkv()), b, docs);
        attention_lse_merge(view(out, b.q_pos, b.q_len, 0, h.nq()), lse.narrow(2, b.q_pos, b.q_len),
                            out_part, lse_part);
      });
      Tensor dq = Tensor::zeros({h.B * h.S, h.nq()}, dt);
      Tensor dkv = Tensor::zeros({h.B * h.S, 2 * h.nkv()}, dt);
      for_each_block([&](const AttentionBlockShape& b, const Tensor& docs) {
        attention_block_backward(
            view(dq, b.q_pos, b.q_len, 0, h.nq()), view(dkv, b.kv_pos, b.kv_len, 0, h.nkv()),
            view(dkv, b.kv_pos, b.kv_len, h.nkv(), h.nkv()),
            view(dout, b.q_pos, b.q_len, 0, h.nq()), view(qkv, b.q_pos, b.q_len, 0, h.nq()),
            view(qkv, b.kv_pos, b.kv_len, h.nq(), h.nkv()),
            view(qkv, b.kv_pos, b.kv_len, h.nq() + h.nkv(), h.nkv()),
            view(out, b.q_pos, b.q_len, 0, h.nq()), lse.narrow(2, b.q_pos, b.q_len), b, docs);
      });
      Tensor dqkv = Tensor::empty(qkv.shape(), dt);
      attention_assemble_dqkv(dqkv, dq, dkv);
      const double e_out = relative_error(out, full.out), e_lse = relative_error(lse, full.lse);
      const double e_dqkv = relative_error(dqkv, full.dqkv);
      MESSAGE((cuts.size() - 1) << " chunks: " << skipped
                                << " blocks skipped before every query's document; relative error "
                                   "out "
                                << e_out << ", lse " << e_lse << ", dqkv " << e_dqkv);
      CHECK(e_out < 1e-6);
      CHECK(e_lse < 1e-6);
      CHECK(e_dqkv < 1e-6);
      if (cuts.size() == 5) CHECK(skipped > 0);  // chunk 3's queries start at 11 and 9
    }
  }

  TEST_CASE(
      "block_causal model: each document of a window has the loss and gradients it has "
      "alone in a window of its own") {
    for (int64_t n_kv_heads : {4, 2}) {
      CAPTURE(n_kv_heads);
      const ModelArgs args = tiny_args(n_kv_heads);
      Transformer model(args, DType::F64);
      model.allocate();
      model.init_weights(5);
      const std::vector<int64_t> lengths = {5, 1, 7, 3};
      const int64_t S = 16;
      const Tensor tokens = testing::random_tokens(1, S, args.vocab_size, 51);
      const Tensor targets = testing::random_tokens(1, S, args.vocab_size, 52);
      const ModelRun packed = run_model(model, tokens, targets, doc_starts_of({lengths}, S));

      double loss_sum = 0;
      std::vector<Tensor> grad_sum;
      int64_t s = 0;
      for (int64_t n : lengths) {
        CAPTURE(s);
        const ModelRun alone = run_model(model, tokens.narrow(1, s, n).contiguous(),
                                         targets.narrow(1, s, n).contiguous(), Tensor());
        // Its tokens' outputs, and so each token's loss.
        const double e_x =
            relative_error(packed.final_x.rows(s, s + n).contiguous(), alone.final_x);
        CHECK(e_x < 1e-12);
        loss_sum += alone.loss;
        if (grad_sum.empty()) {
          grad_sum = alone.grads;
        } else {
          for (size_t i = 0; i < grad_sum.size(); ++i) {
            std::vector<double> a = testing::to_doubles(grad_sum[i]);
            const std::vector<double> g = testing::to_doubles(alone.grads[i]);
            for (size_t k = 0; k < a.size(); ++k) a[k] += g[k];
            grad_sum[i] = Tensor::from_vector<double>(a, grad_sum[i].shape());
          }
        }
        s += n;
      }
      CHECK(std::fabs(packed.loss - loss_sum) <= 1e-12 * std::fabs(loss_sum));
      double worst = 0;
      for (size_t i = 0; i < grad_sum.size(); ++i) {
        worst = std::max(worst, relative_error(packed.grads[i], grad_sum[i]));
      }
      MESSAGE("Hkv " << n_kv_heads << ": loss " << packed.loss << " packed vs " << loss_sum
                     << " alone; worst relative gradient difference " << worst);
      CHECK(worst < 1e-11);
    }
  }

  TEST_CASE(
      "block_causal model: a stream with no EOS is causal bit for bit and an EOS at "
      "every token makes each token a document of its own") {
    const ModelArgs args = tiny_args(2);
    Transformer model(args, DType::F64);
    model.allocate();
    model.init_weights(6);
    // The document starts data::document_starts finds in these streams (test_documents.cpp).
    const int32_t eos = 31;
    const int64_t S = 8;
    // No EOS: the document starts are all 0, and the model computes the causal window.
    Tensor tokens = testing::random_tokens(2, S, eos, 61);  // ids below the EOS
    const Tensor targets = testing::random_tokens(2, S, args.vocab_size, 62);
    const ModelRun causal = run_model(model, tokens, targets, Tensor());
    const ModelRun no_eos = run_model(model, tokens, targets, Tensor::zeros({2, S}, DType::I32));
    CHECK(causal.loss == no_eos.loss);
    for (size_t i = 0; i < causal.grads.size(); ++i) {
      CHECK(testing::bitwise_equal(causal.grads[i], no_eos.grads[i]));
    }
    // Every input an EOS: each token sees itself alone; its loss is that of a window of one.
    Tensor all_eos = Tensor::empty({1, S}, DType::I32);
    all_eos.fill_(eos);
    Tensor own_start = Tensor::empty({1, S}, DType::I32);
    std::iota(own_start.data<int32_t>(), own_start.data<int32_t>() + S, 0);
    const ModelRun every =
        run_model(model, all_eos, targets.narrow(0, 0, 1).contiguous(), own_start);
    double alone = 0;
    for (int64_t i = 0; i < S; ++i) {
      alone += run_model(model, all_eos.narrow(1, i, 1).contiguous(),
                         targets.narrow(0, 0, 1).narrow(1, i, 1).contiguous(), Tensor())
                   .loss;
    }
    CHECK(std::fabs(every.loss - alone) <= 1e-12 * std::fabs(alone));
    MESSAGE("an EOS at every token: loss " << every.loss << ", windows of one token " << alone);
  }
}  // TEST_SUITE

}  // namespace attention_mask_test
