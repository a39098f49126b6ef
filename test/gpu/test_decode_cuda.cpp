// Text generation on CUDA: the decode attention kernel and the KV cache write
// (model/ops/attention/attention_decode.cu) against their CPU twins on the same inputs, and the
// whole decoder (model/inference/decoder.h) on CUDA against full recomputation, and its decode step
// replayed as a CUDA graph against the same steps run eagerly.
//
// Tolerances: f32 kernels and cuBLASLt's fp32 GEMMs (CUBLAS_COMPUTE_32F, no TF32) differ from the
// CPU only in summation order: 1e-5 (relative L2 of the attention output; the largest logit
// error of a row over its largest logit, as the CPU test of test/model/test_decoder.cpp). bf16
// storage rounds every activation to 2^-9: 1e-2 for the kernel, 3e-2 of a row's largest logit
// for the decoder in bf16 against training's own CUDA forward in bf16 (whose logits are bf16).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cast.h"
#include "model/inference/decoder.h"
#include "model/ops/attention/attention_decode.h"
#include "support/full_forward.h"
#include "support/gpu.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace {

constexpr double kDecodePoison = 1e30;

// Rows of two sequences in one call: sequence 0 prefills positions 0..prefill-1; sequence 2
// has `history` positions cached already and decodes one row at position `history`.
struct Rows {
  std::vector<int32_t> seq, pos;
};
Rows ragged_rows(int32_t prefill, int32_t history) {
  Rows r;
  for (int32_t p = 0; p < prefill; ++p) {
    r.seq.push_back(0);
    r.pos.push_back(p);
  }
  r.seq.push_back(2);
  r.pos.push_back(history);
  return r;
}

void check_decode_attention(DType dtype, int64_t H, int64_t Hkv, int64_t Dh) {
  CAPTURE(dtype_name(dtype));
  CAPTURE(H);
  CAPTURE(Hkv);
  CAPTURE(Dh);
  const Rows rows = ragged_rows(9, 40);
  const int64_t T = static_cast<int64_t>(rows.seq.size()), B = 3, S_max = 48;
  const DecodeAttentionShape shape{H, Hkv, Dh};
  // Values bf16 holds exactly, so that both sides start from the same numbers.
  const Tensor qkv =
      testing::bf16_values(testing::random_tensor({T, (H + 2 * Hkv) * Dh}, DType::F32, 41, 2.0));
  const Tensor k0 =
      testing::bf16_values(testing::random_tensor({B, Hkv, S_max, Dh}, DType::F32, 42));
  const Tensor v0 =
      testing::bf16_values(testing::random_tensor({B, Hkv, S_max, Dh}, DType::F32, 43));
  const Tensor seq = Tensor::from_vector(rows.seq, {T}), pos = Tensor::from_vector(rows.pos, {T});

  Tensor k = k0.clone(), v = v0.clone(), out = Tensor::empty({T, H * Dh}, DType::F32);
  kv_cache_write(k, v, qkv, seq, pos, shape);
  attention_decode(out, qkv, k, v, seq, pos, shape);

  const Device cuda = Device::cuda(0);
  auto on_cuda = [&](const Tensor& t) { return cast(t, dtype).to(cuda); };
  const Tensor k_d = on_cuda(k0), v_d = on_cuda(v0), qkv_d = on_cuda(qkv);
  Tensor out_d = Tensor::empty({T, H * Dh}, dtype, cuda);
  out_d.fill_(kDecodePoison);
  kv_cache_write(k_d, v_d, qkv_d, seq.to(cuda), pos.to(cuda), shape);
  attention_decode(out_d, qkv_d, k_d, v_d, seq.to(cuda), pos.to(cuda), shape);

  // The write moves values: exact in either dtype (they were bf16 values already).
  CHECK(testing::bitwise_equal(cast(k_d.to(Device::cpu()), DType::F32), k));
  CHECK(testing::bitwise_equal(cast(v_d.to(Device::cpu()), DType::F32), v));
  const double error = testing::relative_l2_error(cast(out_d.to(Device::cpu()), DType::F32), out);
  MESSAGE(dtype_name(dtype), " H ", H, " Hkv ", Hkv, " Dh ", Dh, ": relative L2 error ", error);
  CHECK(error <= (dtype == DType::F32 ? 1e-5 : 1e-2));
}

double row_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Greedy decoding of one prompt with the decoder: the sequence and the logits of every fed
// position ([fed, V], host f32).
std::pair<std::vector<int32_t>, std::vector<std::vector<float>>> decode(Transformer& model,
                                                                        std::vector<int32_t> tokens,
                                                                        int64_t steps,
                                                                        DType cache) {
  Decoder decoder(model, {cache, false});
  decoder.start(1, static_cast<int64_t>(tokens.size()) + steps);
  const int64_t V = model.args().vocab_size;
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> feed = tokens, seqs(tokens.size(), 0);
  std::vector<int64_t> rows(tokens.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor out = decoder.forward(feed, seqs, rows);
    for (int64_t r = 0; r < out.size(0); ++r) {
      logits.emplace_back(out.data<float>() + r * V, out.data<float>() + (r + 1) * V);
    }
    const std::vector<float>& last = logits.back();
    tokens.push_back(
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    feed = {tokens.back()};
    seqs = {0};
    rows = {0};
  }
  return {tokens, logits};
}

Transformer model_on(Device device, DType dtype) {
  testing::SmallModelDims dims;
  dims.dim = 128;
  dims.n_layers = 2;
  dims.n_heads = 4;
  dims.n_kv_heads = 2;
  dims.vocab_size = 300;
  Transformer model(testing::small_model_args(dims), DType::F32);
  model.allocate(device);
  model.init_weights(17);
  if (dtype != DType::F32) {
    for (Parameter* p : model.parameters()) p->value = cast(p->value, dtype);
  }
  return model;
}

// Greedy decoding of every prompt at once: a prefill, then `steps` decode steps of one row per
// sequence, sequence 1 (of several) left out after step `drop_at`, as a finished completion
// is. The tokens of each sequence and every logit returned, in order.
struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> logits;
  int64_t graphs = 0;
};
GreedyRun greedy(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                 int64_t steps, int64_t drop_at, DecoderOptions options) {
  Decoder decoder(model, options);
  const int64_t B = static_cast<int64_t>(prompts.size()), V = model.args().vocab_size;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  decoder.start(B, static_cast<int64_t>(longest) + steps);
  GreedyRun run{prompts, {}, 0};
  std::vector<int32_t> feed, seqs, active;
  std::vector<int64_t> rows;
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t t : prompts[static_cast<size_t>(b)]) {
      feed.push_back(t);
      seqs.push_back(b);
    }
    rows.push_back(static_cast<int64_t>(feed.size()) - 1);
    active.push_back(b);
  }
  for (int64_t step = 0; step <= steps; ++step) {
    const Tensor out = decoder.forward(feed, seqs, rows);
    const float* data = out.data<float>();
    run.logits.insert(run.logits.end(), data, data + out.numel());
    if (step == steps) break;
    // Row i of out is sequence active[i], as fed.
    std::vector<int32_t> still;
    feed.clear();
    seqs.clear();
    rows.clear();
    for (size_t i = 0; i < active.size(); ++i) {
      const int32_t b = active[i];
      const float* row = data + static_cast<int64_t>(i) * V;
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + V) - row);
      run.tokens[static_cast<size_t>(b)].push_back(next);
      if (b == 1 && step >= drop_at) continue;  // sequence 1 has finished
      rows.push_back(static_cast<int64_t>(still.size()));
      still.push_back(b);
      feed.push_back(next);
      seqs.push_back(b);
    }
    active = still;
  }
  run.graphs = decoder.graphs_captured();
  return run;
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE(
      "gpu: the decode step replayed as a CUDA graph gives eager decoding's tokens and logits bit "
      "for bit for batch 1 and batch 3 (one sequence finishing early)") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const std::vector<std::vector<int32_t>> three{
        {256, 73, 110, 32}, {5, 9}, {256, 116, 104, 101, 32, 99, 97}};
    for (DType dtype : {DType::F32, DType::BF16}) {
      CAPTURE(dtype_name(dtype));
      Transformer model = model_on(Device::cuda(0), dtype);
      for (const auto& prompts : {std::vector<std::vector<int32_t>>{three.front()}, three}) {
        const int64_t steps = 12, drop_at = 5;
        CAPTURE(prompts.size());
        const GreedyRun eager = greedy(model, prompts, steps, drop_at, {dtype, false, false});
        const GreedyRun graph = greedy(model, prompts, steps, drop_at, {dtype, false, true});
        CHECK(eager.graphs == 0);
        // One graph of B rows; with three, one more of two rows once sequence 1 is left out.
        CHECK(graph.graphs == (prompts.size() == 1 ? 1 : 2));
        CHECK(graph.tokens == eager.tokens);
        REQUIRE(graph.logits.size() == eager.logits.size());
        CHECK(std::memcmp(graph.logits.data(), eager.logits.data(),
                          graph.logits.size() * sizeof(float)) == 0);
      }
    }
  }

  TEST_CASE(
      "gpu: decode attention and the KV cache write match the CPU twin in f32 and bf16 for MHA and "
      "GQA") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (DType dtype : {DType::F32, DType::BF16}) {
      check_decode_attention(dtype, 4, 4, 16);
      check_decode_attention(dtype, 8, 2, 64);
      check_decode_attention(dtype, 8, 1, 128);
      check_decode_attention(dtype, 4, 2, 256);
    }
  }

  TEST_CASE(
      "gpu: decoding with a KV cache on CUDA gives full recomputation's logits and greedy tokens") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const std::vector<int32_t> prompt{256, 73, 110, 32, 116, 104, 101};
    const int64_t steps = 16;
    // f32: the CUDA decoder against training's forward on the CPU.
    Transformer cpu = model_on(Device::cpu(), DType::F32);
    Transformer cuda = model_on(Device::cuda(0), DType::F32);
    const int64_t V = cpu.args().vocab_size;
    const auto [tokens, logits] = decode(cuda, prompt, steps, DType::F32);
    const int64_t fed = static_cast<int64_t>(tokens.size()) - 1;
    const Tensor full = testing::full_forward_logits(
        cpu,
        Tensor::from_vector(std::vector<int32_t>(tokens.begin(), tokens.begin() + fed), {1, fed}));
    double worst = 0;
    for (int64_t p = 0; p < fed; ++p) {
      const float* expected = full.data<float>() + p * V;
      worst = std::max(worst, row_error(logits[static_cast<size_t>(p)].data(), expected, V));
      if (p + 1 >= static_cast<int64_t>(prompt.size())) {
        CHECK(std::max_element(expected, expected + V) - expected ==
              tokens[static_cast<size_t>(p + 1)]);
      }
    }
    MESSAGE("CUDA f32 decoder against the CPU's full recomputation: largest logit error ", worst);
    CHECK(worst <= 1e-5);

    // bf16: the CUDA decoder against training's own CUDA forward in bf16 over its tokens.
    Transformer bf16 = model_on(Device::cuda(0), DType::BF16);
    const auto [bf16_tokens, bf16_logits] = decode(bf16, prompt, steps, DType::BF16);
    const Tensor bf16_full = testing::full_forward_logits(
        bf16, Tensor::from_vector(std::vector<int32_t>(bf16_tokens.begin(), bf16_tokens.end() - 1),
                                  {1, fed}));
    double bf16_worst = 0;
    for (int64_t p = 0; p < fed; ++p) {
      bf16_worst = std::max(bf16_worst, row_error(bf16_logits[static_cast<size_t>(p)].data(),
                                                  bf16_full.data<float>() + p * V, V));
    }
    MESSAGE("CUDA bf16 decoder against training's CUDA forward in bf16: largest logit error ",
            bf16_worst);
    CHECK(bf16_worst <= 3e-2);
  }
}
