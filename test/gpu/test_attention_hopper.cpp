// The Hopper attention forward (model/ops/attention/attention_hopper.cu: wgmma, TMA,
// FlashAttention-3's design) against the CPU twin and the native forward on the same inputs, causal
// and unmasked, MHA and GQA, Dh 64 and 128, S on and off the 128-row tiles; and the native backward
// fed by its out and lse, which is how model.attention_backend hopper trains. Each case skips with
// one line on a machine without a Hopper GPU or a build without sm_90a code.
//
// qkv is random f32 rounded to bf16, so both sides see identical values; outputs are poisoned
// before the CUDA run, so a row the kernel forgets to write fails. Tolerances are docs/cuda.md's
// attention ones (relative L2 over a tensor): lse 1e-5, out and dqkv 1e-2.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cast.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/attention/attention_block.h"
#include "model/ops/attention/attention_hopper.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using titan::Device;
using titan::DType;
using titan::Tensor;
using titan::model::AttentionBackend;
using titan::model::AttentionShape;
using titan::testing::relative_l2_error;

namespace {

constexpr double kHopperPoison = 1e30;

// After SKIP_WITHOUT_CUDA_DEVICE: skips (exit 77, one line) where the kernel cannot run.
void skip_without_hopper() {
  const std::string why = titan::model::hopper_attention_device_refusal();
  if (why.empty()) return;
  std::printf("SKIPPED: the Hopper attention kernel needs %s (built for sm_90a: %s)\n", why.c_str(),
              titan::model::hopper_attention_compiled() ? "yes" : "no");
  std::fflush(stdout);
  std::_Exit(77);
}

struct HopperRun {
  Tensor out, lse;  // on the device: out [T, H·Dh] bf16, lse [B, H, S] f32
};

// The CUDA forward under `backend`, or the Hopper kernel unmasked when !causal.
HopperRun run_cuda_forward(const Tensor& qkv_d, const AttentionShape& a, AttentionBackend backend,
                           bool causal) {
  const Device cuda = Device::cuda(0);
  HopperRun f{Tensor::empty({a.batch * a.seq_len, a.n_heads * a.head_dim}, DType::BF16, cuda),
              Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32, cuda)};
  f.out.fill_(kHopperPoison);
  f.lse.fill_(kHopperPoison);
  if (causal) {
    AttentionShape on = a;
    on.backend = backend;
    titan::model::attention_forward(f.out, f.lse, qkv_d, on);
  } else {
    titan::model::attention_forward_hopper(f.out, f.lse, qkv_d, a, false);
  }
  return f;
}

// The CPU twin: causal, or every key seen (a K/V block wholly before its queries).
void run_cpu_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const AttentionShape& a,
                     bool causal) {
  if (causal) return titan::model::attention_forward(out, lse, qkv, a);
  const int64_t q_cols = a.n_heads * a.head_dim, kv_cols = a.n_kv_heads * a.head_dim;
  const Tensor seq = qkv.view({a.batch, a.seq_len, q_cols + 2 * kv_cols});
  const titan::model::AttentionBlockShape block{a.batch,   a.n_heads, a.n_kv_heads, a.head_dim,
                                                a.seq_len, a.seq_len, a.seq_len,    0};
  titan::model::attention_block_forward(out.view({a.batch, a.seq_len, q_cols}), lse,
                                        seq.narrow(2, 0, q_cols), seq.narrow(2, q_cols, kv_cols),
                                        seq.narrow(2, q_cols + kv_cols, kv_cols), block);
}

void check_hopper_forward(const AttentionShape& a, bool causal) {
  CAPTURE(a.batch);
  CAPTURE(a.seq_len);
  CAPTURE(a.n_heads);
  CAPTURE(a.n_kv_heads);
  CAPTURE(a.head_dim);
  CAPTURE(causal);
  const int64_t tokens = a.batch * a.seq_len, q_cols = a.n_heads * a.head_dim;
  const int64_t row = q_cols + 2 * a.n_kv_heads * a.head_dim;
  // Scale 2: scores of standard deviation ~1.3, softmax rows neither flat nor one-hot.
  const Tensor qkv = titan::testing::bf16_values(
      titan::testing::random_tensor({tokens, row}, DType::F32, 21, 2.0));
  Tensor out_ref = Tensor::empty({tokens, q_cols}, DType::F32);
  Tensor lse_ref = Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32);
  run_cpu_forward(out_ref, lse_ref, qkv, a, causal);

  const Tensor qkv_d = titan::cast(qkv, DType::BF16).to(Device::cuda(0));
  const HopperRun hopper = run_cuda_forward(qkv_d, a, AttentionBackend::Hopper, causal);
  const double e_lse = relative_l2_error(hopper.lse, lse_ref);
  const double e_out = relative_l2_error(hopper.out, out_ref);
  double n_lse = 0, n_out = 0;  // against the native forward (causal only: it has no unmasked)
  if (causal) {
    const HopperRun native = run_cuda_forward(qkv_d, a, AttentionBackend::Native, true);
    n_lse = relative_l2_error(hopper.lse, native.lse);
    n_out = relative_l2_error(hopper.out, native.out);
  }
  std::printf(
      "attention hopper %s B=%lld S=%lld H=%lld Hkv=%lld Dh=%lld: relative L2 error against the "
      "CPU lse %.1e out %.1e, against native lse %.1e out %.1e\n",
      causal ? "causal" : "unmasked", static_cast<long long>(a.batch),
      static_cast<long long>(a.seq_len), static_cast<long long>(a.n_heads),
      static_cast<long long>(a.n_kv_heads), static_cast<long long>(a.head_dim), e_lse, e_out, n_lse,
      n_out);
  CHECK(e_lse <= 1e-5);
  CHECK(e_out <= 1e-2);
  CHECK(n_lse <= 1e-5);
  CHECK(n_out <= 1e-2);
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: the Hopper attention forward matches the CPU twin and the native forward") {
    SKIP_WITHOUT_CUDA_DEVICE();
    skip_without_hopper();
    // {B, S, H, Hkv, Dh}: one key (S 1), tails inside a tile (77, 1000), whole tiles (128, 2048),
    // MHA and GQA groups of 2 and 4, both head dims; 2048 runs 16 K/V tiles through the ring.
    const std::vector<AttentionShape> shapes = {
        {1, 1, 4, 4, 64},    {2, 77, 4, 2, 128},   {1, 128, 8, 2, 64},  {1, 128, 4, 4, 128},
        {2, 1000, 4, 1, 64}, {1, 1000, 8, 8, 128}, {1, 2048, 4, 4, 64}, {1, 2048, 8, 2, 128},
    };
    for (bool causal : {true, false}) {
      for (const AttentionShape& a : shapes) check_hopper_forward(a, causal);
    }
  }

  TEST_CASE("gpu: under hopper the native backward reads the Hopper forward's out and lse") {
    SKIP_WITHOUT_CUDA_DEVICE();
    skip_without_hopper();
    const AttentionShape a{2, 300, 8, 2, 128};
    const int64_t tokens = a.batch * a.seq_len, q_cols = a.n_heads * a.head_dim;
    const int64_t row = q_cols + 2 * a.n_kv_heads * a.head_dim;
    const Tensor qkv = titan::testing::bf16_values(
        titan::testing::random_tensor({tokens, row}, DType::F32, 31, 2.0));
    const Tensor dout = titan::testing::bf16_values(
        titan::testing::random_tensor({tokens, q_cols}, DType::F32, 32, 1.0));
    Tensor out_ref = Tensor::empty({tokens, q_cols}, DType::F32);
    Tensor lse_ref = Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32);
    Tensor dqkv_ref = Tensor::empty({tokens, row}, DType::F32);
    titan::model::attention_forward(out_ref, lse_ref, qkv, a);
    titan::model::attention_backward(dqkv_ref, dout, qkv, out_ref, lse_ref, a);

    const Device cuda = Device::cuda(0);
    const Tensor qkv_d = titan::cast(qkv, DType::BF16).to(cuda);
    const Tensor dout_d = titan::cast(dout, DType::BF16).to(cuda);
    Tensor out_d = Tensor::empty({tokens, q_cols}, DType::BF16, cuda);
    Tensor lse_d = Tensor::empty({a.batch, a.n_heads, a.seq_len}, DType::F32, cuda);
    Tensor dqkv_d = Tensor::empty({tokens, row}, DType::BF16, cuda);
    dqkv_d.fill_(kHopperPoison);
    AttentionShape on_hopper = a;
    on_hopper.backend = AttentionBackend::Hopper;
    titan::model::attention_forward(out_d, lse_d, qkv_d, on_hopper);
    titan::model::attention_backward(dqkv_d, dout_d, qkv_d, out_d, lse_d, on_hopper);
    const double e_dqkv = relative_l2_error(dqkv_d, dqkv_ref);
    std::printf("attention hopper forward + native backward: relative L2 error dqkv %.1e\n",
                e_dqkv);
    CHECK(e_dqkv <= 1e-2);

    // A shape it does not take is named, before any launch.
    const AttentionShape dh32{1, 8, 2, 1, 32};
    Tensor qkv32 = Tensor::zeros({8, 4 * 32}, DType::BF16, cuda);
    Tensor out32 = Tensor::empty({8, 2 * 32}, DType::BF16, cuda);
    Tensor lse32 = Tensor::empty({1, 2, 8}, DType::F32, cuda);
    CHECK_THROWS_WITH(titan::model::attention_forward_hopper(out32, lse32, qkv32, dh32),
                      doctest::Contains("head dims 64 and 128 (Dh 32)"));
  }

}  // TEST_SUITE
