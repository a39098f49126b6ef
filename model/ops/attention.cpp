#include "model/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/gemm.h"
#include "model/ops/attention_backend.h"
#if TITAN_CUDNN
#include "model/ops/attention_cudnn.h"
#endif

namespace titan::model {

namespace {

// Column offsets of a head inside a qkv row.
struct QkvLayout {
  int64_t row;  // (H + 2·Hkv)·Dh
  int64_t dh;
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t q(int64_t h) const { return h * dh; }
  int64_t k(int64_t g) const { return (n_heads + g) * dh; }
  int64_t v(int64_t g) const { return (n_heads + n_kv_heads + g) * dh; }
};

// Per (sequence, query head) the CPU twin materialises one S×S score block at a time (the
// GPU kernel tiles it); only lse survives the call. The three products per head are GEMMs
// through core/gemm, which leaves the CPU path limited by OpenBLAS rather than by scalar loops.
// Causal masking is applied to the full block: twice the FLOPs of a tiled kernel, but on the
// CPU's sizes the GEMMs are cheap and the code stays short.
template <class T>
struct HeadView {
  const T* q;  // [S, Dh] with row stride L.row
  const T* k;
  const T* v;
};

template <class T>
HeadView<T> head_view(const T* qkv, const QkvLayout& L, int64_t b, int64_t h, int64_t g,
                      int64_t S) {
  const T* seq = qkv + b * S * L.row;
  return {seq + L.q(h), seq + L.k(g), seq + L.v(g)};
}

// scores[S, S] = scale · Q·Kᵀ
template <class T>
void head_scores(T* scores, const HeadView<T>& hv, const QkvLayout& L, int64_t S, T scale) {
  gemm_cpu<T>(false, true, S, S, L.dh, scale, hv.q, L.row, hv.k, L.row, T(0), scores, S);
}

template <class T>
void attention_forward_cpu(T* out, T* lse, const T* qkv, const AttentionShape& a) {
  const QkvLayout L{(a.n_heads + 2 * a.n_kv_heads) * a.head_dim, a.head_dim, a.n_heads,
                    a.n_kv_heads};
  const int64_t S = a.seq_len, Dh = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int64_t out_row = a.n_heads * Dh;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  std::vector<T> probs(S * S);  // scores, then probabilities, of one head
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const HeadView<T> hv = head_view(qkv, L, b, h, h / group, S);
      head_scores(probs.data(), hv, L, S, scale);
      T* head_lse = lse + (b * a.n_heads + h) * S;
      for (int64_t i = 0; i < S; ++i) {
        T* row = probs.data() + i * S;
        const T m = *std::max_element(row, row + i + 1);
        double l = 0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - m);
          l += row[j];
        }
        const T inv_l = static_cast<T>(1.0 / l);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv_l;
        std::fill(row + i + 1, row + S, T(0));  // causal mask
        head_lse[i] = static_cast<T>(m + std::log(l));
      }
      // out[S, Dh] = P·V
      gemm_cpu<T>(false, false, S, Dh, S, T(1), probs.data(), S, hv.v, L.row, T(0),
                  out + b * S * out_row + h * Dh, out_row);
    }
  }
}

// With P = softmax(scale·QKᵀ) recomputed from lse, and Δ_i = dO_i · O_i:
//   dV += Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ⊙ (dP − Δ) · scale,  dQ = dS·K,  dK += dSᵀ·Q.
// dK and dV accumulate over the query heads that share a kv head (grouped-query attention).
template <class T>
void attention_backward_cpu(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                            const AttentionShape& a) {
  const QkvLayout L{(a.n_heads + 2 * a.n_kv_heads) * a.head_dim, a.head_dim, a.n_heads,
                    a.n_kv_heads};
  const int64_t S = a.seq_len, Dh = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int64_t out_row = a.n_heads * Dh;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  std::vector<T> probs(S * S), dprobs(S * S);
  std::vector<T> delta(S);
  for (int64_t b = 0; b < a.batch; ++b) {
    T* dseq = dqkv + b * S * L.row;
    for (int64_t g = 0; g < a.n_kv_heads; ++g) {
      for (int64_t j = 0; j < S; ++j) {
        std::fill(dseq + j * L.row + L.k(g), dseq + j * L.row + L.k(g) + Dh, T(0));
        std::fill(dseq + j * L.row + L.v(g), dseq + j * L.row + L.v(g) + Dh, T(0));
      }
    }
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / group;
      const HeadView<T> hv = head_view(qkv, L, b, h, g, S);
      const T* dO = dout + b * S * out_row + h * Dh;
      const T* O = out + b * S * out_row + h * Dh;
      const T* head_lse = lse + (b * a.n_heads + h) * S;
      head_scores(probs.data(), hv, L, S, scale);
      for (int64_t i = 0; i < S; ++i) {
        T* row = probs.data() + i * S;
        for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - head_lse[i]);
        std::fill(row + i + 1, row + S, T(0));
        T d = 0;
        for (int64_t e = 0; e < Dh; ++e) d += dO[i * out_row + e] * O[i * out_row + e];
        delta[i] = d;
      }
      // dV[S, Dh] += Pᵀ·dO
      gemm_cpu<T>(true, false, S, Dh, S, T(1), probs.data(), S, dO, out_row, T(1), dseq + L.v(g),
                  L.row);
      // dP[S, S] = dO·Vᵀ
      gemm_cpu<T>(false, true, S, S, Dh, T(1), dO, out_row, hv.v, L.row, T(0), dprobs.data(), S);
      for (int64_t i = 0; i < S; ++i) {
        T* ds = dprobs.data() + i * S;
        const T* p = probs.data() + i * S;
        for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - delta[i]) * scale;
        std::fill(ds + i + 1, ds + S, T(0));
      }
      // dQ[S, Dh] = dS·K ;  dK[S, Dh] += dSᵀ·Q
      gemm_cpu<T>(false, false, S, Dh, S, T(1), dprobs.data(), S, hv.k, L.row, T(0), dseq + L.q(h),
                  L.row);
      gemm_cpu<T>(true, false, S, Dh, S, T(1), dprobs.data(), S, hv.q, L.row, T(1), dseq + L.k(g),
                  L.row);
    }
  }
}

// On the CPU every tensor has qkv's dtype; the CUDA kernels store q, k, v, out and their
// gradients in bf16 and keep lse (a log of a sum over S terms) in f32.
void check_attention(const char* op, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                     const AttentionShape& a, Device device) {
  TT_CHECK(a.batch > 0 && a.seq_len > 0 && a.n_heads > 0 && a.n_kv_heads > 0 && a.head_dim > 0 &&
               a.n_heads % a.n_kv_heads == 0,
           op, ": bad shape B ", a.batch, ", S ", a.seq_len, ", H ", a.n_heads, ", Hkv ",
           a.n_kv_heads, ", Dh ", a.head_dim);
  DType dt = qkv.dtype();
  DType lse_dt = dt;
  if (device.is_cuda()) {
    TT_CHECK(dt == DType::BF16, op, " on ", device, ": the CUDA attention takes bf16 qkv, out, ",
             "dout and dqkv (and an f32 lse), got ", dtype_name(dt), " qkv; cast it to bf16");
    lse_dt = DType::F32;
  }
  int64_t tokens = a.batch * a.seq_len;
  check_tensor(qkv, "attention qkv", {tokens, (a.n_heads + 2 * a.n_kv_heads) * a.head_dim}, dt);
  check_tensor(out, "attention out", {tokens, a.n_heads * a.head_dim}, dt);
  check_tensor(lse, "attention lse", {a.batch, a.n_heads, a.seq_len}, lse_dt);
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                       const AttentionShape& shape) {
  Device device = common_device("attention_forward", {out, lse, qkv});
  check_attention("attention_forward", qkv, out, lse, shape, device);
#if TITAN_CUDA
  if (device.is_cuda()) {
#if TITAN_CUDNN
    if (attention_uses_cudnn(shape)) return attention_forward_cudnn(out, lse, qkv, shape);
#endif
    return attention_forward_cuda(out, lse, qkv, shape);
  }
#endif
  require_cpu("attention_forward", {out, lse, qkv});
  visit_floating(qkv.dtype(), "attention_forward", [&]<class T>() {
    attention_forward_cpu<T>(out.data<T>(), lse.data<T>(), qkv.data<T>(), shape);
  });
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, const AttentionShape& shape) {
  Device device = common_device("attention_backward", {dqkv, dout, qkv, out, lse});
  check_attention("attention_backward", qkv, out, lse, shape, device);
  check_tensor(dqkv, "attention dqkv", qkv.shape(), qkv.dtype());
  check_tensor(dout, "attention dout", out.shape(), qkv.dtype());
#if TITAN_CUDA
  if (device.is_cuda()) {
#if TITAN_CUDNN
    if (attention_uses_cudnn(shape)) {
      return attention_backward_cudnn(dqkv, dout, qkv, out, lse, shape);
    }
#endif
    return attention_backward_cuda(dqkv, dout, qkv, out, lse, shape);
  }
#endif
  require_cpu("attention_backward", {dqkv, dout, qkv, out, lse});
  visit_floating(qkv.dtype(), "attention_backward", [&]<class T>() {
    attention_backward_cpu<T>(dqkv.data<T>(), dout.data<T>(), qkv.data<T>(), out.data<T>(),
                              lse.data<T>(), shape);
  });
}

}  // namespace titan::model
