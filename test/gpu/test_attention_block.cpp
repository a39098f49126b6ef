// The CUDA block attention against its CPU twin on the same inputs, on each backend this build
// has (support/attention_backends.h; cuDNN on the blocks it takes, cudnn_block_refusal): q, k, v,
// dout and the backward's out are random f32 rounded to bf16, so both sides see identical values
// (the CPU op on the rounded f32, the CUDA op on the bf16 copy). Outputs are poisoned before the
// CUDA run; accumulators start from random values on both sides and are compared by what was added
// to them. K and V are strided views of one fused [B, S_kv, 2·Hkv·Dh] buffer, as the ring hands
// them over.
//
// Tolerances (relative L2, as test_attention.cpp): lse 1e-5; out, dq, dk, dv 1e-2 (P and dS
// rounded to bf16 as tensor-core operands); the merge 1e-5 (f32 on both sides, expf against
// std::exp); dqkv's assembly bit for bit (one round to nearest even on both sides).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cast.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/attention/attention_block.h"
#include "model/ops/attention/attention_cudnn.h"
#include "support/attention_backends.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using titan::Device;
using titan::DType;
using titan::Tensor;
using titan::model::AttentionBlockShape;
using titan::testing::relative_l2_error;

namespace {

constexpr double kBlockPoison = 1e30;

Tensor random_block_values(const titan::Shape& shape, uint64_t seed, double scale) {
  return titan::testing::bf16_values(titan::testing::random_tensor(shape, DType::F32, seed, scale));
}

Tensor to_cuda(const Tensor& t, DType dtype) { return titan::cast(t, dtype).to(Device::cuda(0)); }

// lse with −inf (rows that saw no key) in the same places on both sides, and the finite rest
// within `tol`.
void check_lse(const Tensor& lse_d, const Tensor& lse_ref, double tol) {
  std::vector<double> d = titan::testing::to_doubles(lse_d),
                      r = titan::testing::to_doubles(lse_ref);
  REQUIRE(d.size() == r.size());
  int64_t empty_rows = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const bool d_empty = std::isinf(d[i]) && d[i] < 0, r_empty = std::isinf(r[i]) && r[i] < 0;
    CHECK(d_empty == r_empty);
    if (d_empty || r_empty) {
      d[i] = r[i] = 0;
      ++empty_rows;
    }
  }
  const Tensor dt = Tensor::from_vector(d, {static_cast<int64_t>(d.size())});
  const Tensor rt = Tensor::from_vector(r, {static_cast<int64_t>(r.size())});
  const double e = relative_l2_error(dt, rt);
  std::printf("  lse: relative L2 error %.1e (%lld rows saw no key)\n", e,
              static_cast<long long>(empty_rows));
  CHECK(e <= tol);
}

// lse [B, H, S_q] as the view `pad` elements into a [B, H, S_q + pad] buffer, as context
// parallelism's chunks of a sequence's lse are: pad 1 is 4 bytes off the 16-byte alignment of a
// fresh tensor (a chunk at an odd column), pad 4 aligned but strided (every chunk of cp > 1:
// rows of S, not S_q). cuDNN takes neither as it is (attention_cudnn.cpp stages them).
Tensor lse_view(const Tensor& buf, int64_t pad) { return buf.narrow(2, pad, buf.size(2) - pad); }

// [B, H, S_q] into a [B, H, S_q + pad] buffer whose lse_view holds it.
Tensor padded(const Tensor& lse, int64_t pad) {
  const std::vector<double> v = titan::testing::to_doubles(lse);
  const int64_t n = lse.size(2);
  std::vector<double> out;
  for (size_t row = 0; row < v.size() / static_cast<size_t>(n); ++row) {
    out.insert(out.end(), static_cast<size_t>(pad), 0.0);
    out.insert(out.end(), v.begin() + static_cast<int64_t>(row) * n,
               v.begin() + static_cast<int64_t>(row + 1) * n);
  }
  return titan::cast(Tensor::from_vector(out, {lse.size(0), lse.size(1), n + pad}), DType::F32);
}

// What the op added to an accumulator that started at `start`.
Tensor added(const Tensor& acc, const Tensor& start) {
  std::vector<double> a = titan::testing::to_doubles(acc), s = titan::testing::to_doubles(start);
  for (size_t i = 0; i < a.size(); ++i) a[i] -= s[i];
  return Tensor::from_vector(a, acc.shape());
}

// q_doc [B, S_q] on the host (global positions): block_causal; undefined: causal.
// lse_pad: where the lse view starts in its buffer (lse_view).
// `a` on its backend (a.backend) against the CPU twin.
void check_block_matches_cpu(const AttentionBlockShape& a, const Tensor& q_doc = Tensor(),
                             int64_t lse_pad = 1) {
  const std::string backend(titan::model::kAttentionBackends.name(a.backend));
  CAPTURE(backend);
  CAPTURE(lse_pad);
  CAPTURE(a.head_dim);
  CAPTURE(a.q_len);
  CAPTURE(a.kv_len);
  CAPTURE(a.q_pos);
  CAPTURE(a.kv_pos);
  const int64_t nq = a.n_heads * a.head_dim, nkv = a.n_kv_heads * a.head_dim;
  const Tensor q = random_block_values({a.batch, a.q_len, nq}, 21, 2.0);
  const Tensor kv = random_block_values({a.batch, a.kv_len, 2 * nkv}, 22, 2.0);
  const Tensor dout = random_block_values({a.batch, a.q_len, nq}, 23, 1.0);
  auto k_of = [&](const Tensor& t) { return t.narrow(2, 0, nkv); };
  auto v_of = [&](const Tensor& t) { return t.narrow(2, nkv, nkv); };

  // Forward.
  Tensor out_ref = Tensor::empty({a.batch, a.q_len, nq}, DType::F32);
  Tensor lse_ref = Tensor::empty({a.batch, a.n_heads, a.q_len}, DType::F32);
  titan::model::attention_block_forward(out_ref, lse_ref, q, k_of(kv), v_of(kv), a, q_doc);
  const Tensor q_doc_d = q_doc.defined() ? q_doc.to(Device::cuda(0)) : Tensor();
  const Tensor q_d = to_cuda(q, DType::BF16), kv_d = to_cuda(kv, DType::BF16);
  Tensor out_d = Tensor::empty(out_ref.shape(), DType::F32, Device::cuda(0));
  const Tensor lse_buf =
      Tensor::empty({a.batch, a.n_heads, a.q_len + lse_pad}, DType::F32, Device::cuda(0));
  out_d.fill_(kBlockPoison);
  lse_buf.fill_(kBlockPoison);
  titan::model::attention_block_forward(out_d, lse_view(lse_buf, lse_pad), q_d, k_of(kv_d),
                                        v_of(kv_d), a, q_doc_d);
  const Tensor lse_d = lse_view(lse_buf.to(Device::cpu()), lse_pad).contiguous();
  const double e_out = relative_l2_error(out_d, out_ref);
  std::printf(
      "attention block %s H=%lld Hkv=%lld Dh=%lld S_q=%lld at %lld, S_kv=%lld at %lld: "
      "out %.1e\n",
      backend.c_str(), static_cast<long long>(a.n_heads), static_cast<long long>(a.n_kv_heads),
      static_cast<long long>(a.head_dim), static_cast<long long>(a.q_len),
      static_cast<long long>(a.q_pos), static_cast<long long>(a.kv_len),
      static_cast<long long>(a.kv_pos), e_out);
  CHECK(e_out <= 1e-2);
  check_lse(lse_d, lse_ref, 1e-5);

  // Merge into a running result (rows with −inf included).
  const Tensor run_out = titan::testing::random_tensor(out_ref.shape(), DType::F32, 24);
  const Tensor run_lse = titan::testing::random_tensor(lse_ref.shape(), DType::F32, 25, 3.0);
  Tensor merged_out = run_out.clone(), merged_lse = run_lse.clone();
  titan::model::attention_lse_merge(merged_out, merged_lse, out_ref, lse_ref);
  Tensor merged_out_d = run_out.to(Device::cuda(0)), merged_lse_d = run_lse.to(Device::cuda(0));
  titan::model::attention_lse_merge(merged_out_d, merged_lse_d, out_ref.to(Device::cuda(0)),
                                    lse_ref.to(Device::cuda(0)));
  CHECK(relative_l2_error(merged_out_d, merged_out) <= 1e-5);
  CHECK(relative_l2_error(merged_lse_d, merged_lse) <= 1e-5);

  // Backward, from the CPU's out (rounded to bf16, as the model keeps it) and lse.
  const Tensor out_b = titan::testing::bf16_values(out_ref);
  const Tensor dq0 = titan::testing::random_tensor(q.shape(), DType::F32, 26);
  const Tensor dkv0 = titan::testing::random_tensor(kv.shape(), DType::F32, 27);
  Tensor dq_ref = dq0.clone(), dkv_ref = dkv0.clone();
  titan::model::attention_block_backward(dq_ref, k_of(dkv_ref), v_of(dkv_ref), dout, q, k_of(kv),
                                         v_of(kv), out_b, lse_ref, a, q_doc);
  Tensor dq_d = dq0.to(Device::cuda(0)), dkv_d = dkv0.to(Device::cuda(0));
  titan::model::attention_block_backward(
      dq_d, k_of(dkv_d), v_of(dkv_d), to_cuda(dout, DType::BF16), q_d, k_of(kv_d), v_of(kv_d),
      to_cuda(out_b, DType::BF16), lse_view(padded(lse_ref, lse_pad).to(Device::cuda(0)), lse_pad),
      a, q_doc_d);
  const Tensor dkv_added_d = added(dkv_d, dkv0), dkv_added = added(dkv_ref, dkv0);
  const double e_dq = relative_l2_error(added(dq_d, dq0), added(dq_ref, dq0));
  const double e_dk =
      relative_l2_error(k_of(dkv_added_d).contiguous(), k_of(dkv_added).contiguous());
  const double e_dv =
      relative_l2_error(v_of(dkv_added_d).contiguous(), v_of(dkv_added).contiguous());
  std::printf("  dq %.1e dk %.1e dv %.1e\n", e_dq, e_dk, e_dv);
  CHECK(e_dq <= 1e-2);
  CHECK(e_dk <= 1e-2);
  CHECK(e_dv <= 1e-2);
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE(
      "gpu: attention block forward merge and backward match the CPU twin on native and cudnn") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // {B, H, Hkv, Dh, S_q, S_kv, q_pos, kv_pos}: a diagonal block off the tile grid, a block
    // wholly in the past, queries of which the first 100 see no key, a ring's chunk pair; tails
    // of every tile size, GQA groups of 2 and 4, MHA. Then the blocks of context parallelism
    // cuDNN takes too: the ring's diagonal (causal from the first key), off the tile grid, the
    // ring's past blocks (unmasked), and the all-gather's (causal to the last key), each with
    // Dh 64 and 128.
    const std::vector<AttentionBlockShape> blocks = {
        {2, 4, 2, 64, 200, 300, 150, 0},    {1, 8, 2, 128, 130, 257, 400, 0},
        {2, 4, 4, 32, 200, 180, 0, 100},    {1, 2, 1, 16, 96, 96, 96, 96},
        {1, 8, 8, 128, 256, 256, 512, 0},   {2, 4, 2, 64, 130, 130, 260, 260},
        {1, 8, 8, 128, 200, 200, 200, 200}, {2, 4, 2, 64, 200, 180, 400, 0},
        {2, 4, 1, 128, 130, 130, 390, 130}, {2, 4, 2, 64, 100, 300, 200, 0},
        {1, 8, 2, 128, 130, 390, 260, 0},
    };
    titan::testing::for_each_attention_backend([&](titan::model::AttentionBackend backend) {
      for (AttentionBlockShape a : blocks) {
        const std::string refusal = titan::model::cudnn_block_refusal(a);
        if (backend == titan::model::AttentionBackend::Cudnn && !refusal.empty()) {
          continue;  // native runs those
        }
        a.backend = backend;
        for (const int64_t lse_pad : {1, 4}) check_block_matches_cpu(a, {}, lse_pad);
      }
    });
  }

  TEST_CASE("gpu: block_causal attention blocks match the CPU twin") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // Queries at 1000..1299 whose documents start at 1000 − 50 (one begun before the chunk),
    // then at 1017, 1145 and 1290 (documents of 1 to 128 tokens and a long one), against K/V
    // chunks before them, on the diagonal and straddling their starts; a second sequence in
    // one document from 0. Rows that see no key of a block keep the merge's identity.
    const int64_t Sq = 300, q_pos = 1000;
    Tensor q_doc = Tensor::empty({2, Sq}, DType::I32);
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t p = q_pos + i;
      q_doc.data<int32_t>()[i] = static_cast<int32_t>(p < 1017   ? 950
                                                      : p < 1145 ? 1017
                                                      : p < 1290 ? 1145
                                                                 : 1290);
      q_doc.data<int32_t>()[Sq + i] = 0;
    }
    const std::vector<AttentionBlockShape> blocks = {
        {2, 4, 2, 64, Sq, 300, q_pos, 700},    // past keys; only row 0..16 reach 950..999
        {2, 4, 2, 128, Sq, Sq, q_pos, q_pos},  // the diagonal
        {2, 4, 1, 32, Sq, 260, q_pos, 1040},   // straddling: starts inside the keys
        {2, 8, 8, 64, Sq, 1300, q_pos, 0},     // the all-gather's prefix
    };
    for (const AttentionBlockShape& a : blocks) check_block_matches_cpu(a, q_doc);
  }

  TEST_CASE("gpu: attention block assembles dqkv as the CPU does bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t T = 37, nq = 64, nkv = 32;
    const Tensor dq = titan::testing::random_tensor({T, nq}, DType::F32, 28);
    const Tensor dkv = titan::testing::random_tensor({T, nkv}, DType::F32, 29);
    Tensor dqkv_ref = Tensor::empty({T, nq + nkv}, DType::F32);
    titan::model::attention_assemble_dqkv(dqkv_ref, dq, dkv);
    Tensor dqkv_d = Tensor::empty({T, nq + nkv}, DType::BF16, Device::cuda(0));
    titan::model::attention_assemble_dqkv(dqkv_d, dq.to(Device::cuda(0)), dkv.to(Device::cuda(0)));
    CHECK(titan::testing::bitwise_equal(titan::cast(dqkv_d.to(Device::cpu()), DType::F32),
                                        titan::testing::bf16_values(dqkv_ref)));
  }

#if TITAN_CUDA  // attention_cudnn.cu is built with the CUDA backend only
  // cuDNN writes the block ops' results in bf16; attention_cudnn_to_f32 carries them into the
  // f32 partials (assigned) and gradient sums (added), through strided views of larger buffers.
  // Its CPU twin is the cast and the add written out; one f32 rounding each side, so bit for bit.
  TEST_CASE("gpu: attention_cudnn_to_f32 assigns and adds bf16 and f32 into strided f32 views") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t B = 2, R = 37, N = 72, pad = 24;
    for (const DType src_dtype : {DType::BF16, DType::F32}) {
      for (const bool accumulate : {false, true}) {
        const std::string dtype(titan::dtype_name(src_dtype));
        CAPTURE(dtype);
        CAPTURE(accumulate);
        const Tensor src_wide = titan::testing::bf16_values(
            titan::testing::random_tensor({B, R, N + pad}, DType::F32, 31));
        const Tensor dst_wide = titan::testing::random_tensor({B, R, N + pad}, DType::F32, 32);
        // The CPU twin: dst = (accumulate ? dst : 0) + f32(src), element by element.
        const std::vector<double> src = titan::testing::to_doubles(src_wide.narrow(2, pad, N));
        const std::vector<double> dst0 = titan::testing::to_doubles(dst_wide.narrow(2, 0, N));
        std::vector<double> expect(src.size());
        for (size_t i = 0; i < src.size(); ++i) {
          const float s = static_cast<float>(src[i]);
          expect[i] = accumulate ? static_cast<double>(static_cast<float>(dst0[i]) + s) : s;
        }
        const Tensor src_d = to_cuda(src_wide, src_dtype);
        const Tensor dst_d = dst_wide.to(Device::cuda(0));
        titan::model::attention_cudnn_to_f32(dst_d.narrow(2, 0, N), src_d.narrow(2, pad, N),
                                             accumulate);
        const Tensor got = dst_d.to(Device::cpu());
        CHECK(titan::testing::to_doubles(got.narrow(2, 0, N)) == expect);
        // The columns past the view are untouched.
        CHECK(titan::testing::to_doubles(got.narrow(2, N, pad)) ==
              titan::testing::to_doubles(dst_wide.narrow(2, N, pad)));
      }
    }
  }
#endif
}
