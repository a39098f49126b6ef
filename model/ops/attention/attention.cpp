#include "model/ops/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/gemm.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/attention/attention_tiled_cpu.h"
#if TITAN_CUDNN
#include "model/ops/attention/attention_cudnn.h"
#endif
#if TITAN_CUDA
#include "model/ops/attention/attention_hopper.h"
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
//
// Under block_causal each document is a window of its own: the same calls on its rows alone,
// so that a document packed with others gets, bit for bit, the attention it gets alone.
template <class T>
struct HeadView {
  const T* q;  // [n, Dh] with row stride L.row
  const T* k;
  const T* v;
};

template <class T>
HeadView<T> head_view(const T* rows, const QkvLayout& L, int64_t h, int64_t g) {
  return {rows + L.q(h), rows + L.k(g), rows + L.v(g)};
}

// scores[n, n] = scale · Q·Kᵀ
template <class T>
void head_scores(T* scores, const HeadView<T>& hv, const QkvLayout& L, int64_t n, T scale) {
  gemm_cpu<T>(false, true, n, n, L.dh, scale, hv.q, L.row, hv.k, L.row, T(0), scores, n);
}

QkvLayout qkv_layout(const AttentionShape& a) {
  return {(a.n_heads + 2 * a.n_kv_heads) * a.head_dim, a.head_dim, a.n_heads, a.n_kv_heads};
}

// Calls f(s, n) for the rows [s, s + n) of each document of one sequence of S tokens: the runs
// of equal doc_start (the whole sequence when doc_start is null).
template <class F>
void for_each_document(const int32_t* doc_start, int64_t S, F&& f) {
  if (doc_start == nullptr) return f(int64_t{0}, S);
  for (int64_t s = 0; s < S;) {
    TT_CHECK(doc_start[s] == s, "attention: doc_start[", s, "] is ", doc_start[s],
             ", but a document's first token must hold its own position (data/documents.h)");
    int64_t e = s + 1;
    while (e < S && doc_start[e] == doc_start[s]) ++e;
    f(s, e - s);
    s = e;
  }
}

// Causal attention of n rows as a window of their own: qkv and out point at its first row,
// lse at head 0's entry of that row, heads lse_stride apart.
template <class T>
void forward_window(T* out, T* lse, int64_t lse_stride, const T* qkv, int64_t n,
                    const AttentionShape& a, std::vector<T>& probs) {
  const QkvLayout L = qkv_layout(a);
  const int64_t Dh = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int64_t out_row = a.n_heads * Dh;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  for (int64_t h = 0; h < a.n_heads; ++h) {
    const HeadView<T> hv = head_view(qkv, L, h, h / group);
    head_scores(probs.data(), hv, L, n, scale);
    T* head_lse = lse + h * lse_stride;
    for (int64_t i = 0; i < n; ++i) {
      T* row = probs.data() + i * n;
      const T m = *std::max_element(row, row + i + 1);
      double l = 0;
      for (int64_t j = 0; j <= i; ++j) {
        row[j] = std::exp(row[j] - m);
        l += row[j];
      }
      const T inv_l = static_cast<T>(1.0 / l);
      for (int64_t j = 0; j <= i; ++j) row[j] *= inv_l;
      std::fill(row + i + 1, row + n, T(0));  // causal mask
      head_lse[i] = static_cast<T>(m + std::log(l));
    }
    // out[n, Dh] = P·V
    gemm_cpu<T>(false, false, n, Dh, n, T(1), probs.data(), n, hv.v, L.row, T(0), out + h * Dh,
                out_row);
  }
}

template <class T>
void attention_forward_cpu(T* out, T* lse, const T* qkv, const int32_t* doc_start,
                           const AttentionShape& a) {
  const int64_t S = a.seq_len, row = qkv_layout(a).row, out_row = a.n_heads * a.head_dim;
  std::vector<T> probs(S * S);  // scores, then probabilities, of one head
  for (int64_t b = 0; b < a.batch; ++b) {
    for_each_document(doc_start ? doc_start + b * S : nullptr, S, [&](int64_t s, int64_t n) {
      const int64_t t = b * S + s;
      forward_window(out + t * out_row, lse + b * a.n_heads * S + s, S, qkv + t * row, n, a, probs);
    });
  }
}

// With P = softmax(scale·QKᵀ) recomputed from lse, and Δ_i = dO_i · O_i:
//   dV += Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ⊙ (dP − Δ) · scale,  dQ = dS·K,  dK += dSᵀ·Q.
// dK and dV accumulate over the query heads that share a kv head (grouped-query attention).
// One window of n rows, addressed as forward_window's.
template <class T>
void backward_window(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                     int64_t lse_stride, int64_t n, const AttentionShape& a, std::vector<T>& probs,
                     std::vector<T>& dprobs, std::vector<T>& delta) {
  const QkvLayout L = qkv_layout(a);
  const int64_t Dh = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int64_t out_row = a.n_heads * Dh;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  for (int64_t g = 0; g < a.n_kv_heads; ++g) {
    for (int64_t j = 0; j < n; ++j) {
      std::fill(dqkv + j * L.row + L.k(g), dqkv + j * L.row + L.k(g) + Dh, T(0));
      std::fill(dqkv + j * L.row + L.v(g), dqkv + j * L.row + L.v(g) + Dh, T(0));
    }
  }
  for (int64_t h = 0; h < a.n_heads; ++h) {
    const int64_t g = h / group;
    const HeadView<T> hv = head_view(qkv, L, h, g);
    const T* dO = dout + h * Dh;
    const T* O = out + h * Dh;
    const T* head_lse = lse + h * lse_stride;
    head_scores(probs.data(), hv, L, n, scale);
    for (int64_t i = 0; i < n; ++i) {
      T* row = probs.data() + i * n;
      for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - head_lse[i]);
      std::fill(row + i + 1, row + n, T(0));
      T d = 0;
      for (int64_t e = 0; e < Dh; ++e) d += dO[i * out_row + e] * O[i * out_row + e];
      delta[i] = d;
    }
    // dV[n, Dh] += Pᵀ·dO
    gemm_cpu<T>(true, false, n, Dh, n, T(1), probs.data(), n, dO, out_row, T(1), dqkv + L.v(g),
                L.row);
    // dP[n, n] = dO·Vᵀ
    gemm_cpu<T>(false, true, n, n, Dh, T(1), dO, out_row, hv.v, L.row, T(0), dprobs.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      T* ds = dprobs.data() + i * n;
      const T* p = probs.data() + i * n;
      for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - delta[i]) * scale;
      std::fill(ds + i + 1, ds + n, T(0));
    }
    // dQ[n, Dh] = dS·K ;  dK[n, Dh] += dSᵀ·Q
    gemm_cpu<T>(false, false, n, Dh, n, T(1), dprobs.data(), n, hv.k, L.row, T(0), dqkv + L.q(h),
                L.row);
    gemm_cpu<T>(true, false, n, Dh, n, T(1), dprobs.data(), n, hv.q, L.row, T(1), dqkv + L.k(g),
                L.row);
  }
}

template <class T>
void attention_backward_cpu(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                            const int32_t* doc_start, const AttentionShape& a) {
  const int64_t S = a.seq_len, row = qkv_layout(a).row, out_row = a.n_heads * a.head_dim;
  std::vector<T> probs(S * S), dprobs(S * S), delta(S);
  for (int64_t b = 0; b < a.batch; ++b) {
    for_each_document(doc_start ? doc_start + b * S : nullptr, S, [&](int64_t s, int64_t n) {
      const int64_t t = b * S + s;
      backward_window(dqkv + t * row, dout + t * out_row, qkv + t * row, out + t * out_row,
                      lse + b * a.n_heads * S + s, S, n, a, probs, dprobs, delta);
    });
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

// block_causal's positions: [B, S] i32 beside the other operands.
void check_doc_start(const char* op, const Tensor& doc_start, const AttentionShape& a,
                     Device device) {
  if (!doc_start.defined()) return;
  TT_CHECK(doc_start.device() == device, op, ": doc_start on ", doc_start.device(), " but qkv on ",
           device);
  check_tensor(doc_start, "attention doc_start", {a.batch, a.seq_len}, DType::I32);
}

// The CPU positions of a defined doc_start, or null (causal).
const int32_t* doc_start_data(const Tensor& doc_start) {
  return doc_start.defined() ? doc_start.data<int32_t>() : nullptr;
}

// The q, k and v columns of a fused [B·S, (H + 2·Hkv)·Dh] buffer (qkv, or dqkv with T
// non-const) as the tiled kernel's rows, and the strides of out's [B·S, H·Dh].
template <class T>
struct FusedRows {
  AttentionRows<T> q, k, v;
  int64_t out_sb, out_sr;
};

template <class T>
FusedRows<T> fused_rows(const Tensor& fused, const AttentionShape& a) {
  const QkvLayout L = qkv_layout(a);
  T* p = fused.data<std::remove_const_t<T>>();
  const int64_t sb = a.seq_len * L.row;
  return {{p + L.q(0), sb, L.row},
          {p + L.k(0), sb, L.row},
          {p + L.v(0), sb, L.row},
          a.seq_len * a.n_heads * a.head_dim,
          a.n_heads * a.head_dim};
}

// The whole sequence as one block at position 0; under block_causal each document a window.
TiledAttentionCall tiled_call(const AttentionShape& a, const Tensor& doc_start) {
  TiledAttentionCall call;
  call.shape = {a.batch, a.n_heads, a.n_kv_heads, a.head_dim, a.seq_len, a.seq_len, 0, 0};
  call.q_doc = doc_start_data(doc_start);
  call.q_doc_sb = a.seq_len;
  call.windows = call.q_doc != nullptr;
  return call;
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                       const AttentionShape& shape, const Tensor& doc_start) {
  Device device = common_device("attention_forward", {out, lse, qkv});
  check_attention("attention_forward", qkv, out, lse, shape, device);
  check_doc_start("attention_forward", doc_start, shape, device);
#if TITAN_CUDA
  if (device.is_cuda()) {
#if TITAN_CUDNN
    if (attention_uses_cudnn(shape, doc_start.defined()) &&
        attention_forward_cudnn(out, lse, qkv, shape)) {
      return;
    }
#endif
    if (attention_uses_hopper(shape, doc_start.defined())) {
      return attention_forward_hopper(out, lse, qkv, shape);
    }
    return attention_forward_cuda(out, lse, qkv, shape, doc_start);
  }
#endif
  require_cpu("attention_forward", {out, lse, qkv});
  visit_floating(qkv.dtype(), "attention_forward", [&]<class T>() {
    const FusedRows<const T> r = fused_rows<const T>(qkv, shape);
    tiled_attention_forward<T>(tiled_call(shape, doc_start), {out.data<T>(), r.out_sb, r.out_sr},
                               {lse.data<T>(), shape.n_heads * shape.seq_len, shape.seq_len}, r.q,
                               r.k, r.v);
  });
}

void attention_forward_plain(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             const AttentionShape& shape, const Tensor& doc_start) {
  check_attention("attention_forward_plain", qkv, out, lse, shape, Device::cpu());
  check_doc_start("attention_forward_plain", doc_start, shape, Device::cpu());
  require_cpu("attention_forward_plain", {out, lse, qkv});
  visit_floating(qkv.dtype(), "attention_forward_plain", [&]<class T>() {
    attention_forward_cpu<T>(out.data<T>(), lse.data<T>(), qkv.data<T>(), doc_start_data(doc_start),
                             shape);
  });
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                        const Tensor& doc_start) {
  Device device = common_device("attention_backward", {dqkv, dout, qkv, out, lse});
  check_attention("attention_backward", qkv, out, lse, shape, device);
  check_tensor(dqkv, "attention dqkv", qkv.shape(), qkv.dtype());
  check_tensor(dout, "attention dout", out.shape(), qkv.dtype());
  check_doc_start("attention_backward", doc_start, shape, device);
#if TITAN_CUDA
  if (device.is_cuda()) {
#if TITAN_CUDNN
    if (attention_uses_cudnn(shape, doc_start.defined()) &&
        attention_backward_cudnn(dqkv, dout, qkv, out, lse, shape)) {
      return;
    }
#endif
    return attention_backward_cuda(dqkv, dout, qkv, out, lse, shape, doc_start);
  }
#endif
  require_cpu("attention_backward", {dqkv, dout, qkv, out, lse});
  visit_floating(qkv.dtype(), "attention_backward", [&]<class T>() {
    // The tiled kernel adds into dq, dk and dv: dqkv starts at zero.
    std::fill(dqkv.data<T>(), dqkv.data<T>() + dqkv.numel(), T(0));
    const FusedRows<const T> r = fused_rows<const T>(qkv, shape);
    const FusedRows<T> d = fused_rows<T>(dqkv, shape);
    const AttentionShape& a = shape;
    tiled_attention_backward<T>(
        tiled_call(a, doc_start), d.q, d.k, d.v,
        {dout.data<T>(), r.out_sb, r.out_sr}, r.q, r.k, r.v, {out.data<T>(), r.out_sb, r.out_sr},
        {lse.data<T>(), a.n_heads * a.seq_len, a.seq_len});
  });
}

void attention_backward_plain(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                              const Tensor& doc_start) {
  const char* op = "attention_backward_plain";
  check_attention(op, qkv, out, lse, shape, Device::cpu());
  check_tensor(dqkv, "attention dqkv", qkv.shape(), qkv.dtype());
  check_tensor(dout, "attention dout", out.shape(), qkv.dtype());
  check_doc_start(op, doc_start, shape, Device::cpu());
  require_cpu(op, {dqkv, dout, qkv, out, lse});
  visit_floating(qkv.dtype(), op, [&]<class T>() {
    attention_backward_cpu<T>(dqkv.data<T>(), dout.data<T>(), qkv.data<T>(), out.data<T>(),
                              lse.data<T>(), doc_start_data(doc_start), shape);
  });
}

}  // namespace titan::model
