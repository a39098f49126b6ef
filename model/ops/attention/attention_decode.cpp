#include "model/ops/attention/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/dispatch.h"

namespace titan::model {

namespace {

// A cache element as the compute type, and back: bf16 caches round on store, as CUDA does.
template <class T>
T load(T v) {
  return v;
}
inline float load(bf16_t v) { return bf16_to_float(v); }
template <class C, class T>
C store(T v) {
  if constexpr (std::is_same_v<C, bf16_t>) {
    return float_to_bf16(static_cast<float>(v));
  } else {
    return static_cast<C>(v);
  }
}

struct CacheGeometry {
  int64_t batch, kv_heads, max_seq, head_dim;
  // Element offset of [b, g, p, 0].
  int64_t at(int64_t b, int64_t g, int64_t p) const {
    return ((b * kv_heads + g) * max_seq + p) * head_dim;
  }
};

CacheGeometry geometry(const Tensor& k_cache) {
  return {k_cache.size(0), k_cache.size(1), k_cache.size(2), k_cache.size(3)};
}

// Every row's sequence and position inside the cache: the caller keeps them so, and a row
// outside would read or write another sequence's memory.
void check_rows(const char* op, const Tensor& seq, const Tensor& pos, const CacheGeometry& c) {
  const int32_t* s = seq.data<int32_t>();
  const int32_t* p = pos.data<int32_t>();
  for (int64_t t = 0; t < seq.numel(); ++t) {
    TT_CHECK(s[t] >= 0 && s[t] < c.batch && p[t] >= 0 && p[t] < c.max_seq, op, ": row ", t,
             " is sequence ", s[t], " position ", p[t], ", outside a cache of ", c.batch,
             " sequences × ", c.max_seq, " positions");
  }
}

template <class T, class C>
void kv_cache_write_cpu(C* k_cache, C* v_cache, const T* qkv, const int32_t* seq,
                        const int32_t* pos, int64_t rows, const DecodeAttentionShape& a,
                        const CacheGeometry& c) {
  const int64_t row = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim, Dh = a.head_dim;
  for (int64_t t = 0; t < rows; ++t) {
    const T* k = qkv + t * row + a.n_heads * Dh;
    const T* v = k + a.n_kv_heads * Dh;
    for (int64_t g = 0; g < a.n_kv_heads; ++g) {
      C* kc = k_cache + c.at(seq[t], g, pos[t]);
      C* vc = v_cache + c.at(seq[t], g, pos[t]);
      for (int64_t e = 0; e < Dh; ++e) {
        kc[e] = store<C>(k[g * Dh + e]);
        vc[e] = store<C>(v[g * Dh + e]);
      }
    }
  }
}

// q·k over n elements in kLanes independent partial sums, added pairwise at the end: one
// running sum is a chain of dependent adds that the compiler may not reorder (no -ffast-math),
// while the lanes of a fixed array become vector registers. Only the last bits differ from a
// plain loop.
constexpr int64_t kLanes = 8;

template <class T, class C>
T dot(const T* q, const C* k, int64_t n) {
  T lanes[kLanes] = {};
  int64_t e = 0;
  for (; e + kLanes <= n; e += kLanes) {
    for (int64_t i = 0; i < kLanes; ++i) lanes[i] += q[e + i] * static_cast<T>(load(k[e + i]));
  }
  for (; e < n; ++e) lanes[0] += q[e] * static_cast<T>(load(k[e]));
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  }
  return lanes[0];
}

// o[0..W) = inv_l · Σ_j p_j v[j·stride + 0..W), the W sums held in registers across the
// positions (a fixed W, so that they vectorize; o may alias nothing, but the compiler cannot
// know that, so it is written once at the end).
template <int64_t W, class T, class C>
void weighted_sum(T* o, const std::vector<T>& probs, const C* v, int64_t stride, T inv_l) {
  T acc[W] = {};
  const int64_t length = static_cast<int64_t>(probs.size());
  for (int64_t j = 0; j < length; ++j) {
    const T p = probs[static_cast<size_t>(j)];
    const C* vj = v + j * stride;
    for (int64_t i = 0; i < W; ++i) acc[i] += p * static_cast<T>(load(vj[i]));
  }
  for (int64_t i = 0; i < W; ++i) o[i] = acc[i] * inv_l;
}

// One (row, query head) at a time: scores over the row's positions, a softmax with its maximum
// subtracted and its sum in double (as attention.cpp), then the probabilities times V. Plain
// loops over the cache, written so that they vectorize: at a thousand positions a decode
// step's attention on the CPU costs as much as its GEMMs.
template <class T, class C>
void attention_decode_cpu(T* out, const T* qkv, const C* k_cache, const C* v_cache,
                          const int32_t* seq, const int32_t* pos, int64_t rows,
                          const DecodeAttentionShape& a, const CacheGeometry& c) {
  const int64_t row = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim, Dh = a.head_dim;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Dh)));
  std::vector<T> probs;
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t length = pos[t] + 1;
    probs.resize(static_cast<size_t>(length));
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const T* q = qkv + t * row + h * Dh;
      const C* k = k_cache + c.at(seq[t], h / group, 0);
      const C* v = v_cache + c.at(seq[t], h / group, 0);
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < length; ++j) {
        probs[j] = dot(q, k + j * Dh, Dh) * scale;
        m = std::max(m, probs[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < length; ++j) {
        probs[j] = std::exp(probs[j] - m);
        l += probs[j];
      }
      // out = Σ_j p_j v_j / l, kLanes elements of the head at a time.
      T* o = out + t * a.n_heads * Dh + h * Dh;
      const T inv_l = static_cast<T>(1.0 / l);
      int64_t e0 = 0;
      for (; e0 + kLanes <= Dh; e0 += kLanes) {
        weighted_sum<kLanes>(o + e0, probs, v + e0, Dh, inv_l);
      }
      for (; e0 < Dh; ++e0) weighted_sum<1>(o + e0, probs, v + e0, Dh, inv_l);
    }
  }
}

// The cache's element type beside the activations' T: T itself, or bf16 beside f32.
template <class T, class F>
void visit_cache(DType cache, const char* op, F&& f) {
  if (cache == dtype_of<T>()) return f.template operator()<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (cache == DType::BF16) return f.template operator()<bf16_t>();
  }
  TT_CHECK(false, op, ": a ", dtype_name(cache), " cache beside ", dtype_name(dtype_of<T>()),
           " activations; the CPU takes the activations' dtype, or bf16 beside f32");
}

void check_shapes(const char* op, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                  const Tensor& seq, const Tensor& pos, const DecodeAttentionShape& a) {
  TT_CHECK(a.n_heads > 0 && a.n_kv_heads > 0 && a.head_dim > 0 && a.n_heads % a.n_kv_heads == 0, op,
           ": bad shape H ", a.n_heads, ", Hkv ", a.n_kv_heads, ", Dh ", a.head_dim);
  TT_CHECK(qkv.ndim() == 2 && qkv.is_contiguous() &&
               qkv.size(1) == (a.n_heads + 2 * a.n_kv_heads) * a.head_dim,
           op, ": qkv must be contiguous [T, (H + 2·Hkv)·Dh] = [T, ",
           (a.n_heads + 2 * a.n_kv_heads) * a.head_dim, "], got ", qkv);
  TT_CHECK(k_cache.ndim() == 4 && k_cache.size(1) == a.n_kv_heads &&
               k_cache.size(3) == a.head_dim && k_cache.is_contiguous(),
           op, ": the cache must be contiguous [B, Hkv, S_max, Dh] with Hkv ", a.n_kv_heads,
           ", Dh ", a.head_dim, ", got ", k_cache);
  check_tensor(v_cache, "decode attention v_cache", k_cache.shape(), k_cache.dtype());
  check_tensor(seq, "decode attention seq", {qkv.size(0)}, DType::I32);
  check_tensor(pos, "decode attention pos", {qkv.size(0)}, DType::I32);
}

}  // namespace

void kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                    const Tensor& seq, const Tensor& pos, const DecodeAttentionShape& shape) {
  const Device device = common_device("kv_cache_write", {k_cache, v_cache, qkv, seq, pos});
  check_shapes("kv_cache_write", qkv, k_cache, v_cache, seq, pos, shape);
  if (qkv.size(0) == 0) return;
#if TITAN_CUDA
  if (device.is_cuda()) return kv_cache_write_cuda(k_cache, v_cache, qkv, seq, pos, shape);
#endif
  (void)device;
  require_cpu("kv_cache_write", {k_cache, v_cache, qkv, seq, pos});
  const CacheGeometry c = geometry(k_cache);
  check_rows("kv_cache_write", seq, pos, c);
  visit_floating(qkv.dtype(), "kv_cache_write", [&]<class T>() {
    visit_cache<T>(k_cache.dtype(), "kv_cache_write", [&]<class C>() {
      kv_cache_write_cpu<T, C>(k_cache.data<C>(), v_cache.data<C>(), qkv.data<T>(),
                               seq.data<int32_t>(), pos.data<int32_t>(), qkv.size(0), shape, c);
    });
  });
}

void attention_decode(const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                      const Tensor& v_cache, const Tensor& seq, const Tensor& pos,
                      const DecodeAttentionShape& shape) {
  const Device device = common_device("attention_decode", {out, qkv, k_cache, v_cache, seq, pos});
  check_shapes("attention_decode", qkv, k_cache, v_cache, seq, pos, shape);
  check_tensor(out, "decode attention out", {qkv.size(0), shape.n_heads * shape.head_dim},
               qkv.dtype());
  TT_CHECK(out.is_contiguous(), "attention_decode: out must be contiguous, got ", out);
  if (qkv.size(0) == 0) return;
#if TITAN_CUDA
  if (device.is_cuda()) {
    return attention_decode_cuda(out, qkv, k_cache, v_cache, seq, pos, shape);
  }
#endif
  (void)device;
  require_cpu("attention_decode", {out, qkv, k_cache, v_cache, seq, pos});
  const CacheGeometry c = geometry(k_cache);
  check_rows("attention_decode", seq, pos, c);
  visit_floating(qkv.dtype(), "attention_decode", [&]<class T>() {
    visit_cache<T>(k_cache.dtype(), "attention_decode", [&]<class C>() {
      attention_decode_cpu<T, C>(out.data<T>(), qkv.data<T>(), k_cache.data<C>(), v_cache.data<C>(),
                                 seq.data<int32_t>(), pos.data<int32_t>(), qkv.size(0), shape, c);
    });
  });
}

}  // namespace titan::model
