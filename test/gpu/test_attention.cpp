// The CUDA attention against the CPU twin on the same inputs, on each backend this build has
// (support/attention_backends.h): the native kernels (model/ops/attention/attention.cu) and cuDNN's
// fused attention (model/ops/attention/attention_cudnn.cpp); and block_causal on the native
// kernels, with documents of 1, 17, 128 and 3,000 tokens in one window (cuDNN refuses the mask).
//
// qkv and dout are random f32 rounded to bf16, so both sides see identical values: the CPU op
// runs on the rounded f32 copy (the oracle), the CUDA op on the bf16 copy. Outputs are poisoned
// before the CUDA run, so an element the kernels forget to write fails the comparison.
//
// Tolerances (relative L2 over a tensor, relative_l2_error):
//   lse   1e-5  fp32 softmax statistics of exact bf16 products; only fp32 summation order and
//               exp2/log2 approximations (a few ulp) differ from the CPU.
//   out, dq, dk, dv  1e-2  bf16 storage (2^-9 relative rounding, ~4e-3 in L2) plus P and dS
//               rounded to bf16 as tensor-core operands, as FlashAttention does.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cast.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_backend.h"
#include "support/attention_backends.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using titan::Device;
using titan::DType;
using titan::Tensor;
using titan::model::AttentionShape;
using titan::testing::relative_l2_error;

namespace {

constexpr double kPoison = 1e30;

// f32 values that bf16 holds exactly.
Tensor random_bf16_values(const titan::Shape& shape, uint64_t seed, double scale) {
  return titan::testing::bf16_values(titan::testing::random_tensor(shape, DType::F32, seed, scale));
}

Tensor to_cuda_bf16(const Tensor& t) { return titan::cast(t, DType::BF16).to(Device::cuda(0)); }

// Columns [first, first + count) of a [T, N] tensor, on the host as f32.
Tensor columns(const Tensor& t, int64_t first, int64_t count) {
  return titan::cast(t.to(Device::cpu()).narrow(1, first, count), DType::F32);
}

// doc_start [B, S] on the host: block_causal; undefined: causal.
// `a` on its backend (a.backend) against the CPU twin.
void check_attention_matches_cpu(const AttentionShape& a, const Tensor& doc_start = Tensor()) {
  const std::string backend(titan::model::kAttentionBackends.name(a.backend));
  CAPTURE(backend);
  CAPTURE(a.batch);
  CAPTURE(a.seq_len);
  CAPTURE(a.n_heads);
  CAPTURE(a.n_kv_heads);
  CAPTURE(a.head_dim);
  const int64_t tokens = a.batch * a.seq_len;
  const int64_t q_cols = a.n_heads * a.head_dim, kv_cols = a.n_kv_heads * a.head_dim;
  const int64_t row = q_cols + 2 * kv_cols;
  // Scale 2 gives scores of standard deviation ~1.3: softmax rows neither flat nor one-hot.
  const Tensor qkv = random_bf16_values({tokens, row}, 11, 2.0);
  const Tensor dout = random_bf16_values({tokens, q_cols}, 12, 1.0);

  // CPU oracle.
  Tensor out_ref = Tensor::empty({tokens, q_cols}, DType::F32);
  Tensor lse_ref = Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32);
  Tensor dqkv_ref = Tensor::empty({tokens, row}, DType::F32);
  titan::model::attention_forward(out_ref, lse_ref, qkv, a, doc_start);
  titan::model::attention_backward(dqkv_ref, dout, qkv, out_ref, lse_ref, a, doc_start);

  // CUDA: backward consumes the CUDA forward's out and lse, as in training.
  const Device cuda = Device::cuda(0);
  const Tensor qkv_d = to_cuda_bf16(qkv), dout_d = to_cuda_bf16(dout);
  Tensor out_d = Tensor::empty({tokens, q_cols}, DType::BF16, cuda);
  Tensor lse_d = Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32, cuda);
  Tensor dqkv_d = Tensor::empty({tokens, row}, DType::BF16, cuda);
  out_d.fill_(kPoison);
  lse_d.fill_(kPoison);
  dqkv_d.fill_(kPoison);
  const Tensor doc_d = doc_start.defined() ? doc_start.to(cuda) : Tensor();
  titan::model::attention_forward(out_d, lse_d, qkv_d, a, doc_d);
  titan::model::attention_backward(dqkv_d, dout_d, qkv_d, out_d, lse_d, a, doc_d);

  const Tensor dq = columns(dqkv_d, 0, q_cols), dq_ref = columns(dqkv_ref, 0, q_cols);
  const Tensor dk = columns(dqkv_d, q_cols, kv_cols), dk_ref = columns(dqkv_ref, q_cols, kv_cols);
  const Tensor dv = columns(dqkv_d, q_cols + kv_cols, kv_cols);
  const Tensor dv_ref = columns(dqkv_ref, q_cols + kv_cols, kv_cols);
  const double e_lse = relative_l2_error(lse_d, lse_ref), e_out = relative_l2_error(out_d, out_ref);
  const double e_dq = relative_l2_error(dq, dq_ref), e_dk = relative_l2_error(dk, dk_ref);
  const double e_dv = relative_l2_error(dv, dv_ref);
  std::printf(
      "attention %s%s B=%lld S=%lld H=%lld Hkv=%lld Dh=%lld: relative L2 error lse %.1e out "
      "%.1e dq %.1e dk %.1e dv %.1e\n",
      backend.c_str(), doc_start.defined() ? " block_causal" : "", static_cast<long long>(a.batch),
      static_cast<long long>(a.seq_len), static_cast<long long>(a.n_heads),
      static_cast<long long>(a.n_kv_heads), static_cast<long long>(a.head_dim), e_lse, e_out, e_dq,
      e_dk, e_dv);
  CHECK(e_lse <= 1e-5);
  CHECK(e_out <= 1e-2);
  CHECK(e_dv <= 1e-2);
  if (a.seq_len == 1) {
    // One key per query: p = 1, so ds = p·(dp − Δ) = 0 and dq = dk = 0 exactly; both sides hold
    // only rounding noise, which a relative error would amplify.
    for (const Tensor* t : {&dq, &dk}) {
      for (double v : titan::testing::to_doubles(*t)) CHECK(std::fabs(v) <= 1e-3);
    }
  } else {
    CHECK(e_dq <= 1e-2);
    CHECK(e_dk <= 1e-2);
  }
}

// Sequences of documents of these lengths, each summing to S -> doc_start [B, S] on the host.
Tensor documents(const std::vector<std::vector<int64_t>>& lengths, int64_t S) {
  return titan::testing::document_starts_of(lengths, S);
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: attention forward and backward match the CPU twin on native and cudnn") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // {B, S, H, Hkv, Dh}: tails of S, GQA groups of 2 and 4, MHA, every supported head dim, one
    // key per query (S = 1).
    const std::vector<AttentionShape> shapes = {
        {2, 200, 4, 2, 64}, {1, 257, 8, 8, 128}, {2, 130, 16, 4, 16},  {1, 64, 2, 1, 32},
        {3, 1, 4, 2, 64},   {1, 1, 2, 1, 128},   {1, 1000, 8, 2, 128},  // many kv and query tiles:
                                                                        // the double buffers and dQ
                                                                        // sums
    };
    titan::testing::for_each_attention_backend([&](titan::model::AttentionBackend backend) {
      for (AttentionShape a : shapes) {
        a.backend = backend;
        check_attention_matches_cpu(a);
      }
    });
  }

  TEST_CASE("gpu: block_causal attention matches the CPU twin with documents of 1 to 3000 tokens") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // One window of documents of 1, 17, 128 and 3,000 tokens (S 3,146: boundaries inside the
    // tiles and on none of their edges), and the same lengths in another order beside it.
    const int64_t S = 1 + 17 + 128 + 3000;
    const Tensor docs = documents({{1, 17, 128, 3000}, {3000, 128, 17, 1}}, S);
    check_attention_matches_cpu({2, S, 4, 2, 128}, docs);
    check_attention_matches_cpu({2, S, 4, 1, 64}, docs);
    // Short documents filling a window of 300: most tiles hold several boundaries.
    std::vector<int64_t> short_docs;
    for (int64_t n = 0; n < 300;) {
      const int64_t len = std::min<int64_t>(1 + (n * 7) % 23, 300 - n);
      short_docs.push_back(len);
      n += len;
    }
    check_attention_matches_cpu({1, 300, 4, 2, 32}, documents({short_docs}, 300));
    // Under auto block_causal runs natively; forced to cudnn it is refused.
    check_attention_matches_cpu({1, 300, 4, 2, 64, titan::model::AttentionBackend::Auto},
                                documents({short_docs}, 300));
    if (titan::model::cudnn_attention_compiled()) {
      const Device cuda = Device::cuda(0);
      const AttentionShape a{1, 8, 2, 1, 64, titan::model::AttentionBackend::Cudnn};
      Tensor qkv = Tensor::zeros({8, 4 * 64}, DType::BF16, cuda);
      Tensor out = Tensor::empty({8, 2 * 64}, DType::BF16, cuda);
      Tensor lse = Tensor::empty({1, 2, 8}, DType::F32, cuda);
      CHECK_THROWS_WITH(titan::model::attention_forward(out, lse, qkv, a,
                                                        Tensor::zeros({1, 8}, DType::I32, cuda)),
                        doctest::Contains("block_causal"));
    }
  }

  TEST_CASE("gpu: attention refuses f32 tensors and unsupported head dims") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Device cuda = Device::cuda(0);
    const AttentionShape f32_shape{1, 8, 2, 1, 16};
    Tensor qkv = Tensor::zeros({8, 4 * 16}, DType::F32, cuda);
    Tensor out = Tensor::empty({8, 2 * 16}, DType::F32, cuda);
    Tensor lse = Tensor::empty({1, 2, 8}, DType::F32, cuda);
    CHECK_THROWS_WITH(titan::model::attention_forward(out, lse, qkv, f32_shape),
                      doctest::Contains("takes bf16"));

    const AttentionShape odd_dim{1, 8, 2, 1, 24};
    Tensor qkv24 = Tensor::zeros({8, 4 * 24}, DType::BF16, cuda);
    Tensor out24 = Tensor::empty({8, 2 * 24}, DType::BF16, cuda);
    CHECK_THROWS_WITH(titan::model::attention_forward(out24, lse, qkv24, odd_dim),
                      doctest::Contains("head_dim"));
  }

}  // TEST_SUITE
