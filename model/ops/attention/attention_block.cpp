#include "model/ops/attention/attention_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

namespace titan::model {

namespace {

// Element (b, r, c) of a 3-D view with a contiguous last dim sits at p + b·sb + r·sr + c.
template <class T>
struct View3 {
  T* p;
  int64_t sb, sr;
  T* at(int64_t b, int64_t r) const { return p + b * sb + r * sr; }
};

template <class T>
View3<T> view3(const Tensor& t) {
  return {t.data<T>(), t.strides()[0], t.strides()[1]};
}

// Keys of the block that query row i sees: the first n_visible(i), by the global positions.
int64_t n_visible(const AttentionBlockShape& a, int64_t i) {
  return std::clamp<int64_t>(a.q_pos + i - a.kv_pos + 1, 0, a.kv_len);
}

// Under block_causal a query row sees keys [first_visible, n_visible) of the block: none before
// its document's start. `doc` is q_doc_start's row of one sequence, or null (causal: from 0).
int64_t first_visible(const AttentionBlockShape& a, const int32_t* doc, int64_t i) {
  return doc == nullptr ? 0 : std::clamp<int64_t>(doc[i] - a.kv_pos, 0, a.kv_len);
}

// Sequence b's row of q_doc_start, or null when it is undefined.
const int32_t* doc_row(const Tensor& q_doc_start, int64_t b) {
  if (!q_doc_start.defined()) return nullptr;
  return q_doc_start.data<int32_t>() + b * q_doc_start.strides()[0];
}

// As attention.cpp's twin: one [S_q, S_kv] score block per (sequence, query head), the three
// products per head as GEMMs through core/gemm. With the whole sequence as one block it runs
// exactly attention_forward's arithmetic (a test holds it to that, bit for bit).
template <class T>
void block_forward_cpu(const Tensor& out_t, const Tensor& lse_t, const Tensor& q_t,
                       const Tensor& k_t, const Tensor& v_t, const AttentionBlockShape& a,
                       const Tensor& q_doc_start) {
  const View3<T> q = view3<T>(q_t), k = view3<T>(k_t), v = view3<T>(v_t), out = view3<T>(out_t),
                 lse = view3<T>(lse_t);
  const int64_t Sq = a.q_len, Skv = a.kv_len, Dh = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  std::vector<T> probs(Sq * Skv);  // scores, then probabilities, of one head
  for (int64_t b = 0; b < a.batch; ++b) {
    const int32_t* doc = doc_row(q_doc_start, b);
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / group;
      const T* qh = q.at(b, 0) + h * Dh;
      const T* kh = k.at(b, 0) + g * Dh;
      const T* vh = v.at(b, 0) + g * Dh;
      gemm_cpu<T>(false, true, Sq, Skv, Dh, scale, qh, q.sr, kh, k.sr, T(0), probs.data(), Skv);
      T* head_lse = lse.at(b, h);
      for (int64_t i = 0; i < Sq; ++i) {
        T* row = probs.data() + i * Skv;
        const int64_t lo = first_visible(a, doc, i), n = n_visible(a, i);
        if (n <= lo) {
          std::fill(row, row + Skv, T(0));
          head_lse[i] = -std::numeric_limits<T>::infinity();
          continue;
        }
        const T m = *std::max_element(row + lo, row + n);
        double l = 0;
        for (int64_t j = lo; j < n; ++j) {
          row[j] = std::exp(row[j] - m);
          l += row[j];
        }
        const T inv_l = static_cast<T>(1.0 / l);
        for (int64_t j = lo; j < n; ++j) row[j] *= inv_l;
        std::fill(row, row + lo, T(0));       // earlier documents
        std::fill(row + n, row + Skv, T(0));  // causal mask
        head_lse[i] = static_cast<T>(m + std::log(l));
      }
      gemm_cpu<T>(false, false, Sq, Dh, Skv, T(1), probs.data(), Skv, vh, v.sr, T(0),
                  out.at(b, 0) + h * Dh, out.sr);
    }
  }
}

template <class T>
void lse_merge_cpu(const Tensor& out_t, const Tensor& lse_t, const Tensor& out_part_t,
                   const Tensor& lse_part_t) {
  const View3<T> out = view3<T>(out_t), out_part = view3<T>(out_part_t), lse = view3<T>(lse_t),
                 lse_part = view3<T>(lse_part_t);
  const int64_t B = lse_t.size(0), H = lse_t.size(1), Sq = lse_t.size(2);
  const int64_t Dh = out_t.size(2) / H;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      T* run = lse.at(b, h);
      const T* part = lse_part.at(b, h);
      for (int64_t i = 0; i < Sq; ++i) {
        const double x = run[i], y = part[i];
        const double hi = std::max(x, y), lo = std::min(x, y);
        if (hi == -std::numeric_limits<double>::infinity()) continue;  // neither saw a key
        // log(e^x + e^y) without overflow; exactly hi when the other side is empty, so the
        // first merge into (0, −inf) copies the part bit for bit.
        const double merged = hi + std::log1p(std::exp(lo - hi));
        const T wx = static_cast<T>(std::exp(x - merged));
        const T wy = static_cast<T>(std::exp(y - merged));
        T* o = out.at(b, i) + h * Dh;
        const T* op = out_part.at(b, i) + h * Dh;
        for (int64_t e = 0; e < Dh; ++e) o[e] = wx * o[e] + wy * op[e];
        run[i] = static_cast<T>(merged);
      }
    }
  }
}

// attention.cpp's backward on one block, accumulating: P from the merged lse, Δ from the
// merged out, then dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − Δ)·scale, dQ += dS·K, dK += dSᵀ·Q.
template <class T>
void block_backward_cpu(const Tensor& dq_t, const Tensor& dk_t, const Tensor& dv_t,
                        const Tensor& dout_t, const Tensor& q_t, const Tensor& k_t,
                        const Tensor& v_t, const Tensor& out_t, const Tensor& lse_t,
                        const AttentionBlockShape& a, const Tensor& q_doc_start) {
  const View3<T> dq = view3<T>(dq_t), dk = view3<T>(dk_t), dv = view3<T>(dv_t),
                 dout = view3<T>(dout_t), q = view3<T>(q_t), k = view3<T>(k_t), v = view3<T>(v_t),
                 out = view3<T>(out_t), lse = view3<T>(lse_t);
  const int64_t Sq = a.q_len, Skv = a.kv_len, Dh = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  std::vector<T> probs(Sq * Skv), dprobs(Sq * Skv), delta(Sq);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int32_t* doc = doc_row(q_doc_start, b);
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / group;
      const T* qh = q.at(b, 0) + h * Dh;
      const T* kh = k.at(b, 0) + g * Dh;
      const T* vh = v.at(b, 0) + g * Dh;
      const T* dO = dout.at(b, 0) + h * Dh;
      const T* O = out.at(b, 0) + h * Dh;
      const T* head_lse = lse.at(b, h);
      gemm_cpu<T>(false, true, Sq, Skv, Dh, scale, qh, q.sr, kh, k.sr, T(0), probs.data(), Skv);
      for (int64_t i = 0; i < Sq; ++i) {
        T* row = probs.data() + i * Skv;
        // A row with lse −inf saw no key anywhere, so none here either.
        const int64_t lo = first_visible(a, doc, i);
        const int64_t n = std::isinf(head_lse[i]) ? lo : std::max(lo, n_visible(a, i));
        std::fill(row, row + lo, T(0));
        for (int64_t j = lo; j < n; ++j) row[j] = std::exp(row[j] - head_lse[i]);
        std::fill(row + n, row + Skv, T(0));
        T d = 0;
        for (int64_t e = 0; e < Dh; ++e) d += dO[i * dout.sr + e] * O[i * out.sr + e];
        delta[i] = d;
      }
      gemm_cpu<T>(true, false, Skv, Dh, Sq, T(1), probs.data(), Skv, dO, dout.sr, T(1),
                  dv.at(b, 0) + g * Dh, dv.sr);
      gemm_cpu<T>(false, true, Sq, Skv, Dh, T(1), dO, dout.sr, vh, v.sr, T(0), dprobs.data(), Skv);
      for (int64_t i = 0; i < Sq; ++i) {
        T* ds = dprobs.data() + i * Skv;
        const T* p = probs.data() + i * Skv;
        for (int64_t j = 0; j < Skv; ++j) ds[j] = p[j] * (ds[j] - delta[i]) * scale;
      }
      gemm_cpu<T>(false, false, Sq, Dh, Skv, T(1), dprobs.data(), Skv, kh, k.sr, T(1),
                  dq.at(b, 0) + h * Dh, dq.sr);
      gemm_cpu<T>(true, false, Skv, Dh, Sq, T(1), dprobs.data(), Skv, qh, q.sr, T(1),
                  dk.at(b, 0) + g * Dh, dk.sr);
    }
  }
}

// A 3-D view as the tiled kernel's rows (T const for what it reads).
template <class T>
AttentionRows<T> rows(const Tensor& t) {
  return {t.data<std::remove_const_t<T>>(), t.strides()[0], t.strides()[1]};
}

// The block at its places, masked by q_doc_start's document starts under block_causal.
TiledAttentionCall tiled_call(const AttentionBlockShape& a, const Tensor& q_doc_start) {
  TiledAttentionCall call;
  call.shape = a;
  if (q_doc_start.defined()) {
    call.q_doc = q_doc_start.data<int32_t>();
    call.q_doc_sb = q_doc_start.strides()[0];
  }
  return call;
}

// A 3-D operand of exactly `shape` and `dtype` whose last dim is contiguous.
void check_view(const char* op, const Tensor& t, const char* what, const Shape& shape,
                DType dtype) {
  TT_CHECK(t.defined(), op, ": ", what, " is undefined; expected ", dtype_name(dtype), shape);
  TT_CHECK(t.shape() == shape && t.dtype() == dtype, op, ": ", what, " must be ", dtype_name(dtype),
           shape, ", got ", t);
  TT_CHECK(t.strides()[2] == 1 && t.strides()[1] >= 0 && t.strides()[0] >= 0, op, ": ", what,
           " must have a contiguous last dim (a narrowed view of a [B, S, ·] buffer), got strides ",
           t.strides());
}

void check_shape(const char* op, const AttentionBlockShape& a) {
  TT_CHECK(a.batch > 0 && a.n_heads > 0 && a.n_kv_heads > 0 && a.head_dim > 0 && a.q_len > 0 &&
               a.kv_len > 0 && a.n_heads % a.n_kv_heads == 0 && a.q_pos >= 0 && a.kv_pos >= 0,
           op, ": bad block B ", a.batch, ", H ", a.n_heads, ", Hkv ", a.n_kv_heads, ", Dh ",
           a.head_dim, ", S_q ", a.q_len, " at ", a.q_pos, ", S_kv ", a.kv_len, " at ", a.kv_pos);
}

struct BlockDtypes {
  DType act;    // q, k, v, dout, and the backward's out
  DType stats;  // the forward's out, lse, dq, dk, dv
};

// CPU: one floating dtype throughout. CUDA: bf16 activations, f32 partials and accumulators.
BlockDtypes block_dtypes(const char* op, const Tensor& q, Device device) {
  if (!device.is_cuda()) return {q.dtype(), q.dtype()};
  TT_CHECK(q.dtype() == DType::BF16, op, " on ", device,
           ": the CUDA block attention takes bf16 q, k, v and dout, got ", dtype_name(q.dtype()),
           " q; cast it to bf16");
  return {DType::BF16, DType::F32};
}

// block_causal's positions: an i32 [B, S_q] view with a contiguous last dim, on q's device.
void check_doc_view(const char* op, const Tensor& q_doc_start, const AttentionBlockShape& a,
                    Device device) {
  if (!q_doc_start.defined()) return;
  TT_CHECK(q_doc_start.device() == device, op, ": q_doc_start on ", q_doc_start.device(),
           " but q on ", device);
  TT_CHECK(q_doc_start.shape() == Shape({a.batch, a.q_len}) && q_doc_start.dtype() == DType::I32 &&
               q_doc_start.strides()[1] == 1,
           op, ": q_doc_start must be i32 [B, S_q] = [", a.batch, ", ", a.q_len,
           "] with a contiguous last dim, got ", q_doc_start, " with strides ",
           q_doc_start.strides());
}

void check_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& lse, const AttentionBlockShape& a, const BlockDtypes& dt) {
  check_shape(op, a);
  const Shape q_shape{a.batch, a.q_len, a.n_heads * a.head_dim};
  const Shape kv_shape{a.batch, a.kv_len, a.n_kv_heads * a.head_dim};
  check_view(op, q, "q", q_shape, dt.act);
  check_view(op, k, "k", kv_shape, dt.act);
  check_view(op, v, "v", kv_shape, dt.act);
  check_view(op, lse, "lse", {a.batch, a.n_heads, a.q_len}, dt.stats);
}

}  // namespace

KvBlockPlace kv_block_place(const AttentionBlockShape& a) {
  if (a.kv_pos > a.q_pos + a.q_len - 1) return KvBlockPlace::Future;
  if (a.kv_pos + a.kv_len - 1 <= a.q_pos) return KvBlockPlace::Past;
  return KvBlockPlace::Masked;
}

void attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionBlockShape& shape,
                             const Tensor& q_doc_start) {
  const char* op = "attention_block_forward";
  Device device = common_device(op, {out, lse, q, k, v});
  const BlockDtypes dt = block_dtypes(op, q, device);
  check_operands(op, q, k, v, lse, shape, dt);
  check_view(op, out, "out", {shape.batch, shape.q_len, shape.n_heads * shape.head_dim}, dt.stats);
  check_doc_view(op, q_doc_start, shape, device);
#if TITAN_CUDA
  if (device.is_cuda()) {
#if TITAN_CUDNN
    if (attention_block_uses_cudnn(shape, q_doc_start.defined()) &&
        attention_block_forward_cudnn(out, lse, q, k, v, shape)) {
      return;
    }
#endif
    return attention_block_forward_cuda(out, lse, q, k, v, shape, q_doc_start);
  }
#endif
  require_cpu(op, {out, lse, q, k, v});
  visit_floating(q.dtype(), op, [&]<class T>() {
    tiled_attention_forward<T>(tiled_call(shape, q_doc_start), rows<T>(out), rows<T>(lse),
                               rows<const T>(q), rows<const T>(k), rows<const T>(v));
  });
}

void attention_block_forward_plain(const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v,
                                   const AttentionBlockShape& shape, const Tensor& q_doc_start) {
  const char* op = "attention_block_forward_plain";
  const BlockDtypes dt = block_dtypes(op, q, Device::cpu());
  check_operands(op, q, k, v, lse, shape, dt);
  check_view(op, out, "out", {shape.batch, shape.q_len, shape.n_heads * shape.head_dim}, dt.stats);
  check_doc_view(op, q_doc_start, shape, Device::cpu());
  require_cpu(op, {out, lse, q, k, v});
  visit_floating(q.dtype(), op,
                 [&]<class T>() { block_forward_cpu<T>(out, lse, q, k, v, shape, q_doc_start); });
}

void attention_lse_merge(const Tensor& out, const Tensor& lse, const Tensor& out_part,
                         const Tensor& lse_part) {
  const char* op = "attention_lse_merge";
  Device device = common_device(op, {out, lse, out_part, lse_part});
  TT_CHECK(lse.ndim() == 3 && out.ndim() == 3 && lse.size(0) == out.size(0) &&
               lse.size(2) == out.size(1) && out.size(2) % lse.size(1) == 0,
           op, ": out must be [B, S_q, H·Dh] and lse [B, H, S_q], got ", out, " and ", lse);
  const DType dt = device.is_cuda() ? DType::F32 : out.dtype();
  check_view(op, out, "out", out.shape(), dt);
  check_view(op, lse, "lse", lse.shape(), dt);
  check_view(op, out_part, "out_part", out.shape(), dt);
  check_view(op, lse_part, "lse_part", lse.shape(), dt);
#if TITAN_CUDA
  if (device.is_cuda()) return attention_lse_merge_cuda(out, lse, out_part, lse_part);
#endif
  require_cpu(op, {out, lse, out_part, lse_part});
  visit_floating(dt, op, [&]<class T>() { lse_merge_cpu<T>(out, lse, out_part, lse_part); });
}

void attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse,
                              const AttentionBlockShape& shape, const Tensor& q_doc_start) {
  const char* op = "attention_block_backward";
  Device device = common_device(op, {dq, dk, dv, dout, q, k, v, out, lse});
  const BlockDtypes dt = block_dtypes(op, q, device);
  check_operands(op, q, k, v, lse, shape, dt);
  const Shape q_shape{shape.batch, shape.q_len, shape.n_heads * shape.head_dim};
  const Shape kv_shape{shape.batch, shape.kv_len, shape.n_kv_heads * shape.head_dim};
  check_view(op, out, "out", q_shape, dt.act);
  check_view(op, dout, "dout", q_shape, dt.act);
  check_view(op, dq, "dq", q_shape, dt.stats);
  check_view(op, dk, "dk", kv_shape, dt.stats);
  check_view(op, dv, "dv", kv_shape, dt.stats);
  check_doc_view(op, q_doc_start, shape, device);
  if (kv_block_place(shape) == KvBlockPlace::Future) return;  // no key seen: adds nothing
#if TITAN_CUDA
  if (device.is_cuda()) {
#if TITAN_CUDNN
    if (attention_block_uses_cudnn(shape, q_doc_start.defined()) &&
        attention_block_backward_cudnn(dq, dk, dv, dout, q, k, v, out, lse, shape)) {
      return;
    }
#endif
    return attention_block_backward_cuda(dq, dk, dv, dout, q, k, v, out, lse, shape, q_doc_start);
  }
#endif
  require_cpu(op, {dq, dk, dv, dout, q, k, v, out, lse});
  visit_floating(q.dtype(), op, [&]<class T>() {
    tiled_attention_backward<T>(tiled_call(shape, q_doc_start), rows<T>(dq), rows<T>(dk),
                                rows<T>(dv), rows<const T>(dout), rows<const T>(q),
                                rows<const T>(k), rows<const T>(v), rows<const T>(out),
                                rows<const T>(lse));
  });
}

void attention_block_backward_plain(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionBlockShape& shape,
                                    const Tensor& q_doc_start) {
  const char* op = "attention_block_backward_plain";
  const BlockDtypes dt = block_dtypes(op, q, Device::cpu());
  check_operands(op, q, k, v, lse, shape, dt);
  check_doc_view(op, q_doc_start, shape, Device::cpu());
  if (kv_block_place(shape) == KvBlockPlace::Future) return;
  require_cpu(op, {dq, dk, dv, dout, q, k, v, out, lse});
  visit_floating(q.dtype(), op, [&]<class T>() {
    block_backward_cpu<T>(dq, dk, dv, dout, q, k, v, out, lse, shape, q_doc_start);
  });
}

void attention_assemble_dqkv(const Tensor& dqkv, const Tensor& dq, const Tensor& dkv) {
  const char* op = "attention_assemble_dqkv";
  Device device = common_device(op, {dqkv, dq, dkv});
  TT_CHECK(dqkv.ndim() == 2 && dq.ndim() == 2 && dkv.ndim() == 2 && dq.size(0) == dqkv.size(0) &&
               dkv.size(0) == dqkv.size(0) && dq.size(1) + dkv.size(1) == dqkv.size(1),
           op, ": dqkv [T, (H + 2·Hkv)·Dh] is [dq [T, H·Dh] | dkv [T, 2·Hkv·Dh]], got ", dqkv,
           " from ", dq, " and ", dkv);
  const DType acc = device.is_cuda() ? DType::F32 : dqkv.dtype();
  check_tensor(dq, "attention_assemble_dqkv dq", dq.shape(), acc);
  check_tensor(dkv, "attention_assemble_dqkv dkv", dkv.shape(), acc);
  check_tensor(dqkv, "attention_assemble_dqkv dqkv", dqkv.shape(), dqkv.dtype());
#if TITAN_CUDA
  if (device.is_cuda()) return attention_assemble_dqkv_cuda(dqkv, dq, dkv);
#endif
  require_cpu(op, {dqkv, dq, dkv});
  const int64_t rows = dqkv.size(0), nq = dq.size(1), nkv = dkv.size(1);
  const size_t elem = dtype_size(dqkv.dtype());
  char* dst = static_cast<char*>(dqkv.raw_data());
  const char* q_src = static_cast<const char*>(dq.raw_data());
  const char* kv_src = static_cast<const char*>(dkv.raw_data());
  for (int64_t t = 0; t < rows; ++t) {
    std::memcpy(dst + t * (nq + nkv) * elem, q_src + t * nq * elem, nq * elem);
    std::memcpy(dst + (t * (nq + nkv) + nq) * elem, kv_src + t * nkv * elem, nkv * elem);
  }
}

}  // namespace titan::model
