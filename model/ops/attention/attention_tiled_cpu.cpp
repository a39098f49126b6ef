#include "model/ops/attention/attention_tiled_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"

// glibc's vector exp (libmvec: _ZGVbN4v_expf, _ZGVdN8v_expf, _ZGVeN16v_expf and their double
// twins), which `#pragma omp simd` loops call once these are declared SIMD-callable. glibc
// declares them so itself only under -ffast-math, which would also drop the −inf of the masks.
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float) noexcept;
__attribute__((simd("notinbranch"))) double exp(double) noexcept;
}

namespace titan::model {

namespace {

// Every loop below is compiled three times, for the CPU to pick at load.
#define TITAN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

__attribute__((always_inline)) inline float exp_of(float x) { return expf(x); }
__attribute__((always_inline)) inline double exp_of(double x) { return exp(x); }

// Keys of the block a query row sees: [lo, hi).
struct KeyRange {
  int64_t lo, hi;
};

struct Mask {
  const AttentionBlockShape& a;
  const int32_t* doc;  // this sequence's document starts, or null
  KeyRange keys(int64_t i) const {
    const int64_t hi = std::clamp<int64_t>(a.q_pos + i - a.kv_pos + 1, 0, a.kv_len);
    const int64_t lo = doc == nullptr ? 0 : std::clamp<int64_t>(doc[i] - a.kv_pos, 0, a.kv_len);
    return {lo, std::max(lo, hi)};
  }
};

// The per-thread buffers of one item, kept between items.
template <class T>
struct Scratch {
  std::vector<T> q, q_scaled, k, k_t, v, v_t, s, p, acc, dout, dq, dk, dv;
  std::vector<T> row_max, row_sum, delta;
  void size(int64_t Dh, int64_t Skv) {
    for (std::vector<T>* b : {&q, &q_scaled, &dout, &acc, &dq}) b->resize(kQueryTile * Dh);
    for (std::vector<T>* b : {&k, &k_t, &v, &v_t}) b->resize(kKeyTile * Dh);
    for (std::vector<T>* b : {&s, &p}) b->resize(kQueryTile * kKeyTile);
    for (std::vector<T>* b : {&row_max, &row_sum, &delta}) b->resize(kQueryTile);
    dk.assign(Skv * Dh, T(0));
    dv.assign(Skv * Dh, T(0));
  }
};

template <class T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// rows [n, Dh] (row stride `stride`) into a contiguous [n, Dh], times `scale`; and transposed
// into [Dh, kKeyTile] when `transposed` is not null.
template <class T>
__attribute__((always_inline)) inline void pack(T* __restrict dst, T* __restrict transposed, const T* src, int64_t stride, int64_t n,
          int64_t Dh, T scale) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t e = 0; e < Dh; ++e) dst[r * Dh + e] = src[r * stride + e] * scale;
  }
  if (transposed == nullptr) return;
  for (int64_t e = 0; e < Dh; ++e) {
    for (int64_t r = 0; r < n; ++r) transposed[e * kKeyTile + r] = dst[r * Dh + e];
    for (int64_t r = n; r < kKeyTile; ++r) transposed[e * kKeyTile + r] = T(0);  // see below
  }
}

// c[nq, kKeyTile] = a[nq, Dh] · b_t[Dh, kKeyTile] (b_t's columns past the tile's keys are
// zeros, pack's): always the whole tile width, so that a row of c stays in registers while
// the loop over Dh runs.
template <class T>
__attribute__((always_inline)) inline void tile_product_nt(T* __restrict c,
                                                           const T* __restrict a,
                                                           const T* __restrict b_t, int64_t nq,
                                                           int64_t Dh) {
  for (int64_t i = 0; i < nq; ++i) {
    T row[kKeyTile] = {};
    for (int64_t e = 0; e < Dh; ++e) {
      const T x = a[i * Dh + e];
      const T* be = b_t + e * kKeyTile;
#pragma omp simd
      for (int64_t j = 0; j < kKeyTile; ++j) row[j] += x * be[j];
    }
    T* ci = c + i * kKeyTile;
    for (int64_t j = 0; j < kKeyTile; ++j) ci[j] = row[j];
  }
}

// c[nq, Dh] += a[nq, nk] (row stride kKeyTile) · b[nk, Dh].
template <class T>
__attribute__((always_inline)) inline void tile_product_nn_add(T* __restrict c, const T* __restrict a, const T* __restrict b,
                                int64_t nq, int64_t nk, int64_t Dh) {
  for (int64_t i = 0; i < nq; ++i) {
    T* ci = c + i * Dh;
    for (int64_t j = 0; j < nk; ++j) {
      const T x = a[i * kKeyTile + j];
      const T* bj = b + j * Dh;
#pragma omp simd
      for (int64_t e = 0; e < Dh; ++e) ci[e] += x * bj[e];
    }
  }
}

// c[nk, Dh] += a[nq, nk]ᵀ (row stride kKeyTile) · b[nq, Dh].
template <class T>
__attribute__((always_inline)) inline void tile_product_tn_add(T* __restrict c, const T* __restrict a, const T* __restrict b,
                                int64_t nq, int64_t nk, int64_t Dh) {
  for (int64_t j = 0; j < nk; ++j) {
    T* cj = c + j * Dh;
    for (int64_t i = 0; i < nq; ++i) {
      const T x = a[i * kKeyTile + j];
      const T* bi = b + i * Dh;
#pragma omp simd
      for (int64_t e = 0; e < Dh; ++e) cj[e] += x * bi[e];
    }
  }
}

// p[j] = exp(s[j] − shift) over [lo, hi) of the row, 0 elsewhere in [0, nk).
template <class T>
__attribute__((always_inline)) inline void exp_row(T* __restrict p, const T* __restrict s, T shift, int64_t lo, int64_t hi,
                    int64_t nk) {
  for (int64_t j = 0; j < lo; ++j) p[j] = T(0);
#pragma omp simd
  for (int64_t j = lo; j < hi; ++j) p[j] = exp_of(s[j] - shift);
  for (int64_t j = hi; j < nk; ++j) p[j] = T(0);
}

// The windows of sequence b an item's rows go through, as (first row, rows): under the full
// op's block_causal (call.windows) each document's rows, attended as a causal sequence of its
// own, so that a document packed with others gets, bit for bit, the attention it gets alone (as
// the plain twin's windows do); else the whole block, masked.
struct Window {
  int64_t first, rows;
};

std::vector<Window> windows_of(const TiledAttentionCall& call, int64_t b) {
  if (!call.windows) return {{0, call.shape.q_len}};
  std::vector<Window> windows;
  const int32_t* doc = call.q_doc + b * call.q_doc_sb;
  for (int64_t s = 0; s < call.shape.q_len;) {
    TT_CHECK(doc[s] == s, "attention: doc_start[", s, "] is ", doc[s],
             ", but a document's first token must hold its own position (data/documents.h)");
    int64_t e = s + 1;
    while (e < call.shape.q_len && doc[e] == doc[s]) ++e;
    windows.push_back({s, e - s});
    s = e;
  }
  return windows;
}

// The shape of a window, and the document starts its mask reads (null: causal).
AttentionBlockShape window_shape(const TiledAttentionCall& call, const Window& w) {
  if (!call.windows) return call.shape;
  AttentionBlockShape a = call.shape;
  a.q_len = a.kv_len = w.rows;
  a.q_pos = a.kv_pos = 0;
  return a;
}
const int32_t* window_docs(const TiledAttentionCall& call, int64_t b) {
  return call.windows || call.q_doc == nullptr ? nullptr : call.q_doc + b * call.q_doc_sb;
}

// One (sequence b, query head h) of the forward. kDh: the head dim as a constant (0: read from
// the shape), so that the loops along it unroll and keep their sums in registers.
template <class T, int64_t kDh>
TITAN_VECTOR_CLONES void forward_item(const TiledAttentionCall& call, AttentionRows<T> out,
                                      AttentionRows<T> lse, AttentionRows<const T> q,
                                      AttentionRows<const T> k, AttentionRows<const T> v,
                                      int64_t b, int64_t h) {
  const int64_t Dh = kDh != 0 ? kDh : call.shape.head_dim;
  const int64_t g = h / (call.shape.n_heads / call.shape.n_kv_heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  Scratch<T>& w = scratch<T>();
  w.size(Dh, 0);
  for (const Window& window : windows_of(call, b)) {
    const AttentionBlockShape a = window_shape(call, window);
    const Mask mask{a, window_docs(call, b)};
    const int64_t s0 = window.first;
    const T* qh = q.p + b * q.sb + s0 * q.sr + h * Dh;
    const T* kh = k.p + b * k.sb + s0 * k.sr + g * Dh;
    const T* vh = v.p + b * v.sb + s0 * v.sr + g * Dh;
    T* oh = out.p + b * out.sb + s0 * out.sr + h * Dh;
    T* lh = lse.p + b * lse.sb + h * lse.sr + s0;
    for (int64_t i0 = 0; i0 < a.q_len; i0 += kQueryTile) {
      const int64_t nq = std::min(kQueryTile, a.q_len - i0);
      pack<T>(w.q_scaled.data(), nullptr, qh + i0 * q.sr, q.sr, nq, Dh, scale);
      std::fill(w.acc.begin(), w.acc.begin() + nq * Dh, T(0));
      std::fill(w.row_max.begin(), w.row_max.begin() + nq, neg_inf);
      std::fill(w.row_sum.begin(), w.row_sum.begin() + nq, T(0));
      // Documents start no earlier down the tile, and the causal end moves on with the row.
      const int64_t j_lo = mask.keys(i0).lo, j_hi = mask.keys(i0 + nq - 1).hi;
      for (int64_t j0 = j_lo; j0 < j_hi; j0 += kKeyTile) {
        const int64_t nk = std::min(kKeyTile, j_hi - j0);
        pack<T>(w.k.data(), w.k_t.data(), kh + j0 * k.sr, k.sr, nk, Dh, T(1));
        pack<T>(w.v.data(), nullptr, vh + j0 * v.sr, v.sr, nk, Dh, T(1));
        tile_product_nt<T>(w.s.data(), w.q_scaled.data(), w.k_t.data(), nq, Dh);
        for (int64_t ii = 0; ii < nq; ++ii) {
          const KeyRange r = mask.keys(i0 + ii);
          const int64_t lo = std::clamp<int64_t>(r.lo - j0, 0, nk);
          const int64_t hi = std::clamp<int64_t>(r.hi - j0, lo, nk);
          T* p = w.p.data() + ii * kKeyTile;
          if (lo >= hi) {
            std::fill(p, p + nk, T(0));
            continue;
          }
          const T* sc = w.s.data() + ii * kKeyTile;
          const T old_max = w.row_max[ii];
          const T new_max = std::max(old_max, *std::max_element(sc + lo, sc + hi));
          const T correction = old_max == neg_inf ? T(0) : exp_of(old_max - new_max);
          exp_row<T>(p, sc, new_max, lo, hi, nk);
          T sum = 0;
          for (int64_t j = lo; j < hi; ++j) sum += p[j];
          w.row_sum[ii] = w.row_sum[ii] * correction + sum;
          w.row_max[ii] = new_max;
          if (correction != T(1)) {
            T* acc = w.acc.data() + ii * Dh;
#pragma omp simd
            for (int64_t e = 0; e < Dh; ++e) acc[e] *= correction;
          }
        }
        tile_product_nn_add<T>(w.acc.data(), w.p.data(), w.v.data(), nq, nk, Dh);
      }
      for (int64_t ii = 0; ii < nq; ++ii) {
        T* o = oh + (i0 + ii) * out.sr;
        if (w.row_sum[ii] == T(0)) {  // saw no key
          std::fill(o, o + Dh, T(0));
          lh[i0 + ii] = neg_inf;
          continue;
        }
        const T inv = T(1) / w.row_sum[ii];
        const T* acc = w.acc.data() + ii * Dh;
        for (int64_t e = 0; e < Dh; ++e) o[e] = acc[e] * inv;
        lh[i0 + ii] = w.row_max[ii] + std::log(w.row_sum[ii]);
      }
    }
  }
}

// One (sequence b, kv head g) of the backward: every query head of its group. kDh as above.
template <class T, int64_t kDh>
TITAN_VECTOR_CLONES void backward_item(const TiledAttentionCall& call, AttentionRows<T> dq,
                                       AttentionRows<T> dk, AttentionRows<T> dv,
                                       AttentionRows<const T> dout, AttentionRows<const T> q,
                                       AttentionRows<const T> k, AttentionRows<const T> v,
                                       AttentionRows<const T> out, AttentionRows<const T> lse,
                                       int64_t b, int64_t g) {
  const int64_t Dh = kDh != 0 ? kDh : call.shape.head_dim;
  const int64_t group = call.shape.n_heads / call.shape.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  Scratch<T>& w = scratch<T>();
  w.size(Dh, call.shape.kv_len);  // dK, dV of the item, [S_kv, Dh], summed over heads and windows
  const std::vector<Window> windows = windows_of(call, b);
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (const Window& window : windows) {
      const AttentionBlockShape a = window_shape(call, window);
      const Mask mask{a, window_docs(call, b)};
      const int64_t s0 = window.first;
      const T* qh = q.p + b * q.sb + s0 * q.sr + h * Dh;
      const T* kh = k.p + b * k.sb + s0 * k.sr + g * Dh;
      const T* vh = v.p + b * v.sb + s0 * v.sr + g * Dh;
      const T* doh = dout.p + b * dout.sb + s0 * dout.sr + h * Dh;
      const T* oh = out.p + b * out.sb + s0 * out.sr + h * Dh;
      const T* lh = lse.p + b * lse.sb + h * lse.sr + s0;
      T* dqh = dq.p + b * dq.sb + s0 * dq.sr + h * Dh;
      T* dk_window = w.dk.data() + s0 * Dh;
      T* dv_window = w.dv.data() + s0 * Dh;
      for (int64_t i0 = 0; i0 < a.q_len; i0 += kQueryTile) {
        const int64_t nq = std::min(kQueryTile, a.q_len - i0);
        pack<T>(w.q.data(), nullptr, qh + i0 * q.sr, q.sr, nq, Dh, T(1));
        pack<T>(w.q_scaled.data(), nullptr, qh + i0 * q.sr, q.sr, nq, Dh, scale);
        pack<T>(w.dout.data(), nullptr, doh + i0 * dout.sr, dout.sr, nq, Dh, T(1));
        for (int64_t ii = 0; ii < nq; ++ii) {
          const T* o = oh + (i0 + ii) * out.sr;
          const T* d = w.dout.data() + ii * Dh;
          T delta = 0;
          for (int64_t e = 0; e < Dh; ++e) delta += d[e] * o[e];
          w.delta[ii] = delta;
        }
        std::fill(w.dq.begin(), w.dq.begin() + nq * Dh, T(0));
        const int64_t j_lo = mask.keys(i0).lo, j_hi = mask.keys(i0 + nq - 1).hi;
        for (int64_t j0 = j_lo; j0 < j_hi; j0 += kKeyTile) {
          const int64_t nk = std::min(kKeyTile, j_hi - j0);
          pack<T>(w.k.data(), w.k_t.data(), kh + j0 * k.sr, k.sr, nk, Dh, T(1));
          pack<T>(w.v.data(), w.v_t.data(), vh + j0 * v.sr, v.sr, nk, Dh, T(1));
          tile_product_nt<T>(w.s.data(), w.q_scaled.data(), w.k_t.data(), nq, Dh);
          for (int64_t ii = 0; ii < nq; ++ii) {
            const T row_lse = lh[i0 + ii];
            const KeyRange r = mask.keys(i0 + ii);
            // A row with lse −inf saw no key anywhere, so none here either.
            const int64_t lo = std::clamp<int64_t>(r.lo - j0, 0, nk);
            const int64_t hi = std::isinf(row_lse) ? lo : std::clamp<int64_t>(r.hi - j0, lo, nk);
            exp_row<T>(w.p.data() + ii * kKeyTile, w.s.data() + ii * kKeyTile, row_lse, lo, hi,
                       nk);
          }
          // dV += Pᵀ·dO
          tile_product_tn_add<T>(dv_window + j0 * Dh, w.p.data(), w.dout.data(), nq, nk, Dh);
          // dS = P ⊙ (dO·Vᵀ − Δ) · scale, in s
          tile_product_nt<T>(w.s.data(), w.dout.data(), w.v_t.data(), nq, Dh);
          for (int64_t ii = 0; ii < nq; ++ii) {
            T* ds = w.s.data() + ii * kKeyTile;
            const T* p = w.p.data() + ii * kKeyTile;
            const T delta = w.delta[ii];
#pragma omp simd
            for (int64_t j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - delta) * scale;
          }
          // dQ += dS·K ;  dK += dSᵀ·Q
          tile_product_nn_add<T>(w.dq.data(), w.s.data(), w.k.data(), nq, nk, Dh);
          tile_product_tn_add<T>(dk_window + j0 * Dh, w.s.data(), w.q.data(), nq, nk, Dh);
        }
        for (int64_t ii = 0; ii < nq; ++ii) {
          T* d = dqh + (i0 + ii) * dq.sr;
          const T* src = w.dq.data() + ii * Dh;
          for (int64_t e = 0; e < Dh; ++e) d[e] += src[e];
        }
      }
    }
  }
  T* dkh = dk.p + b * dk.sb + g * Dh;
  T* dvh = dv.p + b * dv.sb + g * Dh;
  for (int64_t j = 0; j < call.shape.kv_len; ++j) {
    for (int64_t e = 0; e < Dh; ++e) {
      dkh[j * dk.sr + e] += w.dk[j * Dh + e];
      dvh[j * dv.sr + e] += w.dv[j * Dh + e];
    }
  }
}

// The item kernel for the call's head dim: a constant for the common ones.
template <class T, template <class, int64_t> class Kernel, class... Args>
void run_item(int64_t head_dim, Args&&... args) {
  switch (head_dim) {
    case 16: return Kernel<T, 16>::run(args...);
    case 32: return Kernel<T, 32>::run(args...);
    case 64: return Kernel<T, 64>::run(args...);
    case 128: return Kernel<T, 128>::run(args...);
    default: return Kernel<T, 0>::run(args...);
  }
}

template <class T, int64_t kDh>
struct ForwardKernel {
  template <class... Args>
  static void run(Args&&... args) {
    forward_item<T, kDh>(args...);
  }
};

template <class T, int64_t kDh>
struct BackwardKernel {
  template <class... Args>
  static void run(Args&&... args) {
    backward_item<T, kDh>(args...);
  }
};

}  // namespace

template <class T>
void tiled_attention_forward(const TiledAttentionCall& call, AttentionRows<T> out,
                             AttentionRows<T> lse, AttentionRows<const T> q,
                             AttentionRows<const T> k, AttentionRows<const T> v) {
  const AttentionBlockShape& a = call.shape;
  parallel_for(a.batch * a.n_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      run_item<T, ForwardKernel>(a.head_dim, call, out, lse, q, k, v, item / a.n_heads,
                                 item % a.n_heads);
    }
  });
}

template <class T>
void tiled_attention_backward(const TiledAttentionCall& call, AttentionRows<T> dq,
                              AttentionRows<T> dk, AttentionRows<T> dv,
                              AttentionRows<const T> dout, AttentionRows<const T> q,
                              AttentionRows<const T> k, AttentionRows<const T> v,
                              AttentionRows<const T> out, AttentionRows<const T> lse) {
  const AttentionBlockShape& a = call.shape;
  parallel_for(a.batch * a.n_kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      run_item<T, BackwardKernel>(a.head_dim, call, dq, dk, dv, dout, q, k, v, out, lse,
                                  item / a.n_kv_heads, item % a.n_kv_heads);
    }
  });
}

#define TITAN_TILED_ATTENTION(T)                                                              \
  template void tiled_attention_forward<T>(const TiledAttentionCall&, AttentionRows<T>,        \
                                           AttentionRows<T>, AttentionRows<const T>,           \
                                           AttentionRows<const T>, AttentionRows<const T>);    \
  template void tiled_attention_backward<T>(                                                   \
      const TiledAttentionCall&, AttentionRows<T>, AttentionRows<T>, AttentionRows<T>,         \
      AttentionRows<const T>, AttentionRows<const T>, AttentionRows<const T>,                  \
      AttentionRows<const T>, AttentionRows<const T>, AttentionRows<const T>);
TITAN_TILED_ATTENTION(float)
TITAN_TILED_ATTENTION(double)
#undef TITAN_TILED_ATTENTION

}  // namespace titan::model
