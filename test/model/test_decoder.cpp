// Text generation's decoder (model/inference/decoder.h) against training's forward: decoding with
// a KV cache — a batch of prompts of different lengths prefilled in one call, then one token per
// sequence per call — gives the logits that recomputing every position of the whole sequence
// without a cache gives (test/support/full_forward.h, TransformerBlock::forward itself), and so
// the same greedy tokens, for multi-head and grouped-query attention. And the decode attention
// op alone against training's attention over the same window.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/inference/decoder.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_decode.h"
#include "support/full_forward.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace {

// max |a − b| over a row, relative to the row's largest |b|: logits near zero make an
// element-wise relative error meaningless, the row's scale does not.
double decoder_row_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

struct Decoded {
  std::vector<std::vector<int32_t>> tokens;  // per sequence: prompt, then every generated token
  // Per sequence, the logits of each fed position, in position order ([V] each).
  std::vector<std::vector<std::vector<float>>> logits;
};

// Prefills every prompt in one call (logits of every row), then decodes `steps` greedy tokens
// per sequence, one call per step with one row per sequence.
Decoded decode_greedy(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                      int64_t steps, DecoderOptions options = {}) {
  Decoder decoder(model, options);
  const int64_t B = static_cast<int64_t>(prompts.size()), V = model.args().vocab_size;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  decoder.start(B, static_cast<int64_t>(longest) + steps);
  Decoded out{prompts, std::vector<std::vector<std::vector<float>>>(prompts.size())};

  std::vector<int32_t> tokens, seqs;
  std::vector<int64_t> rows;
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t t : prompts[static_cast<size_t>(b)]) {
      rows.push_back(static_cast<int64_t>(tokens.size()));
      tokens.push_back(t);
      seqs.push_back(b);
    }
  }
  Tensor logits = decoder.forward(tokens, seqs, rows);
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* row = logits.data<float>() + r * V;
    out.logits[static_cast<size_t>(seqs[static_cast<size_t>(r)])].emplace_back(row, row + V);
  }
  for (int64_t step = 0; step < steps; ++step) {
    tokens.clear();
    seqs.clear();
    rows.clear();
    for (int32_t b = 0; b < B; ++b) {
      const std::vector<float>& last = out.logits[static_cast<size_t>(b)].back();
      const int32_t next = argmax(last.data(), V);
      out.tokens[static_cast<size_t>(b)].push_back(next);
      if (step + 1 == steps) continue;  // the last token is never fed
      rows.push_back(static_cast<int64_t>(tokens.size()));
      tokens.push_back(next);
      seqs.push_back(b);
    }
    if (tokens.empty()) break;
    logits = decoder.forward(tokens, seqs, rows);
    for (int32_t b = 0; b < B; ++b) {
      const float* row = logits.data<float>() + b * V;
      out.logits[static_cast<size_t>(b)].emplace_back(row, row + V);
    }
  }
  return out;
}

Transformer small_model(int64_t heads, int64_t kv_heads, uint64_t seed) {
  testing::SmallModelDims dims;
  dims.dim = 64;
  dims.n_layers = 2;
  dims.n_heads = heads;
  dims.n_kv_heads = kv_heads;
  dims.vocab_size = 97;
  Transformer model(testing::small_model_args(dims), DType::F32);
  model.allocate();
  model.init_weights(seed);
  return model;
}

const std::vector<std::vector<int32_t>> kDecoderPrompts = {
    {1, 5, 9, 13, 2}, {7}, {3, 3, 40, 41, 42, 8, 60, 61, 2}};

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "generate: decoding with a KV cache gives full recomputation's logits and greedy tokens for "
      "MHA and GQA") {
    for (const auto& [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {4, 1}}) {
      CAPTURE(heads);
      CAPTURE(kv_heads);
      Transformer model = small_model(heads, kv_heads, 11);
      const int64_t V = model.args().vocab_size, steps = 12;
      const Decoded decoded = decode_greedy(model, kDecoderPrompts, steps);
      for (size_t b = 0; b < kDecoderPrompts.size(); ++b) {
        CAPTURE(b);
        const std::vector<int32_t>& sequence = decoded.tokens[b];
        // Every fed position: the prompt and all generated tokens but the last.
        const int64_t fed = static_cast<int64_t>(sequence.size()) - 1;
        REQUIRE(static_cast<int64_t>(decoded.logits[b].size()) == fed);
        const Tensor tokens = Tensor::from_vector(
            std::vector<int32_t>(sequence.begin(), sequence.begin() + fed), {1, fed});
        const Tensor full = testing::full_forward_logits(model, tokens);
        double worst = 0;
        for (int64_t p = 0; p < fed; ++p) {
          const float* expected = full.data<float>() + p * V;
          worst = std::max(
              worst,
              decoder_row_error(decoded.logits[b][static_cast<size_t>(p)].data(), expected, V));
          // The token after each position is the full recomputation's greedy choice there too
          // (for prompt positions this compares nothing generated; the checks that count are
          // from the last prompt position on).
          if (p + 1 >= static_cast<int64_t>(kDecoderPrompts[b].size())) {
            CHECK_MESSAGE(argmax(expected, V) == sequence[static_cast<size_t>(p + 1)], "position ",
                          p);
          }
        }
        MESSAGE("H ", heads, ", Hkv ", kv_heads, ", sequence ", b, ": ", fed,
                " positions, largest logit error ", worst, " of the row's scale");
        CHECK(worst <= 1e-5);
      }
    }
  }

  TEST_CASE(
      "generate: a sequence decodes the same alone and in a batch and a second batch starts "
      "clean") {
    Transformer model = small_model(4, 2, 12);
    const Decoded batched = decode_greedy(model, kDecoderPrompts, 8);
    for (size_t b = 0; b < kDecoderPrompts.size(); ++b) {
      const Decoded alone = decode_greedy(model, {kDecoderPrompts[b]}, 8);
      CHECK(alone.tokens[0] == batched.tokens[b]);
    }
    // Another batch on a decoder that decoded before: nothing of the old cache leaks in.
    Decoder decoder(model, {});
    decoder.start(2, 32);
    const std::vector<int32_t> tokens{5, 6, 7}, seqs{0, 0, 1};
    const std::vector<int64_t> rows{1, 2};
    const Tensor first = decoder.forward(tokens, seqs, rows);
    decoder.start(2, 32);
    CHECK(decoder.length(0) == 0);
    const Tensor again = decoder.forward(tokens, seqs, rows);
    CHECK(testing::bitwise_equal(first, again));
    CHECK(decoder.length(0) == 2);
    CHECK(decoder.length(1) == 1);
  }

  TEST_CASE("generate: a bf16 KV cache and bf16 GEMM operands on the CPU stay near f32") {
    Transformer model = small_model(4, 2, 13);
    const int64_t V = model.args().vocab_size;
    const Decoded f32 = decode_greedy(model, kDecoderPrompts, 6);
    const Decoded bf16 = decode_greedy(model, kDecoderPrompts, 6, {DType::BF16, true});
    double worst = 0;
    for (size_t b = 0; b < kDecoderPrompts.size(); ++b) {
      for (size_t p = 0; p < bf16.logits[b].size(); ++p) {
        worst = std::max(worst,
                         decoder_row_error(bf16.logits[b][p].data(), f32.logits[b][p].data(), V));
      }
    }
    MESSAGE("bf16 cache and GEMM operands: largest logit error ", worst, " of the row's scale");
    CHECK(worst > 0);  // the cache really is bf16
    CHECK(worst < 3e-2);
  }

  TEST_CASE(
      "generate: the full-recomputation oracle is training's loss: its cross-entropy is "
      "evaluate's") {
    Transformer model = small_model(4, 2, 14);
    const int64_t V = model.args().vocab_size, B = 2, S = 10;
    const Tensor tokens = testing::random_tokens(B, S, V, 21);
    const Tensor targets = testing::random_tokens(B, S, V, 22);
    const Tensor logits = testing::full_forward_logits(model, tokens);
    double sum = 0;
    for (int64_t t = 0; t < B * S; ++t) {
      const float* row = logits.data<float>() + t * V;
      const double m = *std::max_element(row, row + V);
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - m);
      sum += m + std::log(z) - row[targets.data<int32_t>()[t]];
    }
    const double evaluated = model.evaluate(tokens, targets);
    CHECK(std::abs(sum - evaluated) <= 1e-6 * std::abs(evaluated));
  }

  TEST_CASE(
      "generate: decode attention over a cache equals training's causal attention over the "
      "window") {
    const int64_t S = 13, H = 6, Hkv = 2, Dh = 8, row = (H + 2 * Hkv) * Dh;
    const Tensor qkv = testing::random_tensor({S, row}, DType::F32, 31);
    Tensor expected = Tensor::empty({S, H * Dh}, DType::F32);
    Tensor lse = Tensor::empty({1, H, S}, DType::F32);
    attention_forward(expected, lse, qkv, {1, S, H, Hkv, Dh});

    // The window as sequence 1 of a cache of 3, written in two calls (5 rows, then 8), each
    // call's rows attending as they are written.
    const Tensor k = Tensor::zeros({3, Hkv, 20, Dh}, DType::F32);
    const Tensor v = Tensor::zeros({3, Hkv, 20, Dh}, DType::F32);
    Tensor out = Tensor::empty({S, H * Dh}, DType::F32);
    const DecodeAttentionShape shape{H, Hkv, Dh};
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, S}}) {
      std::vector<int32_t> seq(static_cast<size_t>(end - begin), 1), pos;
      for (int64_t p = begin; p < end; ++p) pos.push_back(static_cast<int32_t>(p));
      const Tensor seq_t = Tensor::from_vector(seq, {end - begin});
      const Tensor pos_t = Tensor::from_vector(pos, {end - begin});
      const Tensor rows = qkv.rows(begin, end).contiguous();
      kv_cache_write(k, v, rows, seq_t, pos_t, shape);
      attention_decode(out.rows(begin, end), rows, k, v, seq_t, pos_t, shape);
    }
    const testing::Comparison c = testing::compare(out, expected, {1e-6, 1e-5}, "decode attention");
    CHECK_MESSAGE(c.ok, c.report);
    // Sequences 0 and 2 were never written.
    CHECK(testing::to_doubles(k.rows(0, 1)) == std::vector<double>(Hkv * 20 * Dh, 0.0));
    CHECK(testing::to_doubles(v.rows(2, 3)) == std::vector<double>(Hkv * 20 * Dh, 0.0));
  }

  TEST_CASE("generate: a CUDA graph of the decode step is refused over tp ranks and on the CPU") {
    struct TwoRanks final : TensorParallelComm {
      int64_t size() const override { return 2; }
    };
    Transformer model = small_model(4, 2, 3);
    DecoderOptions graph;
    graph.cuda_graph = true;
    CHECK_THROWS_WITH_AS(Decoder(model, graph, std::make_shared<TwoRanks>()),
                         doctest::Contains("on 2 tp ranks; the tp all-reduce cannot be captured"),
                         Error);
    CHECK_THROWS_WITH_AS(Decoder(model, graph),
                         doctest::Contains("a CUDA graph of the decode step needs CUDA weights"),
                         Error);
    CHECK_NOTHROW(Decoder(model, DecoderOptions{}));
  }

  TEST_CASE("generate: decode attention refuses a row outside the cache") {
    const DecodeAttentionShape shape{2, 1, 4};
    const Tensor qkv = testing::random_tensor({1, 16}, DType::F32, 1);
    const Tensor k = Tensor::zeros({1, 1, 4, 4}, DType::F32), v = k.clone();
    const Tensor seq = Tensor::from_vector<int32_t>({0}, {1});
    CHECK_THROWS_AS(kv_cache_write(k, v, qkv, seq, Tensor::from_vector<int32_t>({4}, {1}), shape),
                    Error);
    CHECK_THROWS_AS(kv_cache_write(k, v, qkv, Tensor::from_vector<int32_t>({1}, {1}),
                                   Tensor::from_vector<int32_t>({0}, {1}), shape),
                    Error);
  }
}
