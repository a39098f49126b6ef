// CUDA twin of model/ops/attention/attention_decode.h: attention of a few query rows against a KV
// cache.
//
// Why this shape: a decode step has one query row per sequence, so there is no query tile to
// feed tensor cores, and the work is reading the cache once (memory bound). A CTA owns one
// (row, query head): its warps split the row's positions (warp w takes j = w, w + W, …), the 32
// lanes of a warp split the head's Dh elements (lane l holds e = l, l + 32, …, at most
// kMaxPerLane of them), so each key and value row is read by one warp in coalesced 4- or 2-byte
// elements. A warp keeps a running (max, sum, accumulator) over its positions (online softmax,
// fp32); the warps then merge theirs through shared memory and one warp writes the row.
// Prefill rows (many positions per sequence) run the same kernel: a CTA per (row, head) is
// plenty of parallelism there, and the score matrix is never stored.
//
// Layouts: qkv [T, (H + 2·Hkv)·Dh], out [T, H·Dh], cache [B, Hkv, S_max, Dh], seq/pos [T] i32.
// A row whose seq or pos lies outside the cache (the caller's bug) writes NaN, so tests see it.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/stream.h"
#include "model/ops/attention/attention_decode.h"

namespace titan::model {

namespace {

struct DecodeConfig {
  static constexpr int kWarps = 4;       // warps per CTA, each over a quarter of the positions
  static constexpr int kMaxPerLane = 8;  // Dh ≤ 32 · 8 = 256
  static constexpr int kWriteThreads = 256;
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__global__ void kv_cache_write_kernel(T* k_cache, T* v_cache, const T* qkv, const int32_t* seq,
                                      const int32_t* pos, int64_t rows, int n_heads, int kv_heads,
                                      int head_dim, int64_t batch, int64_t max_seq) {
  const int64_t row = static_cast<int64_t>(n_heads + 2 * kv_heads) * head_dim;
  const int64_t per_row = static_cast<int64_t>(kv_heads) * head_dim;
  const int64_t n = rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, ge = i - t * per_row;
    const int64_t g = ge / head_dim, e = ge - g * head_dim;
    const int64_t b = seq[t], p = pos[t];
    if (b < 0 || b >= batch || p < 0 || p >= max_seq) continue;  // attention_decode writes NaN
    const int64_t at = ((b * kv_heads + g) * max_seq + p) * head_dim + e;
    const T* k = qkv + t * row + static_cast<int64_t>(n_heads) * head_dim;
    k_cache[at] = k[ge];
    v_cache[at] = k[per_row + ge];
  }
}

template <class T>
__global__ void __launch_bounds__(DecodeConfig::kWarps * 32)
    attention_decode_kernel(T* out, const T* qkv, const T* k_cache, const T* v_cache,
                            const int32_t* seq, const int32_t* pos, int n_heads, int kv_heads,
                            int head_dim, int64_t batch, int64_t max_seq, float scale) {
  constexpr int W = DecodeConfig::kWarps, E = DecodeConfig::kMaxPerLane;
  __shared__ float warp_max[W], warp_sum_exp[W];
  __shared__ float warp_acc[W][32 * E];

  const int64_t t = blockIdx.x / n_heads;
  const int h = static_cast<int>(blockIdx.x % n_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(n_heads + 2 * kv_heads) * head_dim;
  T* o = out + t * static_cast<int64_t>(n_heads) * head_dim + static_cast<int64_t>(h) * head_dim;
  const int64_t b = seq[t], p = pos[t];
  if (b < 0 || b >= batch || p < 0 || p >= max_seq) {
    for (int e = threadIdx.x; e < head_dim; e += blockDim.x) o[e] = cuda::store_as<T>(NAN);
    return;
  }
  const int g = h / (n_heads / kv_heads);
  const T* q = qkv + t * row + static_cast<int64_t>(h) * head_dim;
  const int64_t head = (b * kv_heads + g) * max_seq * head_dim;

  float qv[E], acc[E];
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const int e = lane + 32 * i;
    qv[i] = e < head_dim ? cuda::load_f32(q[e]) * scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j <= p; j += W) {
    const T* k = k_cache + head + j * head_dim;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const int e = lane + 32 * i;
      if (e < head_dim) s += qv[i] * cuda::load_f32(k[e]);
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), weight = expf(s - m_new);
    l = l * correction + weight;
    const T* v = v_cache + head + j * head_dim;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const int e = lane + 32 * i;
      if (e < head_dim) acc[i] = acc[i] * correction + weight * cuda::load_f32(v[e]);
    }
    m = m_new;
  }

  // Merge the warps' partial softmaxes: rescale each to the common maximum, then sum.
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum_exp[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < E; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float m_all = -INFINITY;
  for (int w = 0; w < W; ++w) m_all = fmaxf(m_all, warp_max[w]);
  float l_all = 0.0f, factor[W];
  for (int w = 0; w < W; ++w) {
    // A warp that saw no position (p + 1 < W) holds m = -inf and l = 0: it adds nothing.
    factor[w] = warp_max[w] == -INFINITY ? 0.0f : expf(warp_max[w] - m_all);
    l_all += warp_sum_exp[w] * factor[w];
  }
  const float inv_l = 1.0f / l_all;
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const int e = lane + 32 * i;
    if (e >= head_dim) continue;
    float sum = 0.0f;
    for (int w = 0; w < W; ++w) sum += warp_acc[w][e] * factor[w];
    o[e] = cuda::store_as<T>(sum * inv_l);
  }
}

void check_cuda_decode(const char* op, const Tensor& qkv, const Tensor& k_cache,
                       const DecodeAttentionShape& a) {
  TT_CHECK(k_cache.dtype() == qkv.dtype(), op, " on ", qkv.device(), ": the cache (",
           dtype_name(k_cache.dtype()), ") must have the activations' dtype (",
           dtype_name(qkv.dtype()), ") on CUDA");
  TT_CHECK(a.head_dim <= 32 * DecodeConfig::kMaxPerLane, op, ": head dim ", a.head_dim,
           " is above the CUDA kernel's ", 32 * DecodeConfig::kMaxPerLane);
  TT_CHECK(a.n_heads <= INT32_MAX / 4 && a.n_kv_heads <= INT32_MAX / 4, op, ": ", a.n_heads,
           " heads");
}

}  // namespace

void kv_cache_write_cuda(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                         const Tensor& seq, const Tensor& pos, const DecodeAttentionShape& shape) {
  check_cuda_decode("kv_cache_write", qkv, k_cache, shape);
  const int64_t n = qkv.size(0) * shape.n_kv_heads * shape.head_dim;
  const int threads = DecodeConfig::kWriteThreads;
  cuda::visit_cuda_floating(qkv.dtype(), "kv_cache_write", [&]<class T>() {
    kv_cache_write_kernel<T><<<cuda::grid_for(n, threads), threads, 0, cuda::current_stream()>>>(
        cuda::device_ptr<T>(k_cache), cuda::device_ptr<T>(v_cache), cuda::device_ptr<T>(qkv),
        cuda::device_ptr<int32_t>(seq), cuda::device_ptr<int32_t>(pos), qkv.size(0),
        static_cast<int>(shape.n_heads), static_cast<int>(shape.n_kv_heads),
        static_cast<int>(shape.head_dim), k_cache.size(0), k_cache.size(2));
    cuda::launch_check();
  });
}

void attention_decode_cuda(const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& seq, const Tensor& pos,
                           const DecodeAttentionShape& shape) {
  check_cuda_decode("attention_decode", qkv, k_cache, shape);
  const int64_t blocks = qkv.size(0) * shape.n_heads;
  TT_CHECK(blocks <= INT32_MAX, "attention_decode: ", qkv.size(0), " rows × ", shape.n_heads,
           " heads are more CTAs than one launch takes");
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  cuda::visit_cuda_floating(qkv.dtype(), "attention_decode", [&]<class T>() {
    attention_decode_kernel<T>
        <<<static_cast<unsigned>(blocks), DecodeConfig::kWarps * 32, 0, cuda::current_stream()>>>(
            cuda::device_ptr<T>(out), cuda::device_ptr<T>(qkv), cuda::device_ptr<T>(k_cache),
            cuda::device_ptr<T>(v_cache), cuda::device_ptr<int32_t>(seq),
            cuda::device_ptr<int32_t>(pos), static_cast<int>(shape.n_heads),
            static_cast<int>(shape.n_kv_heads), static_cast<int>(shape.head_dim), k_cache.size(0),
            k_cache.size(2), scale);
    cuda::launch_check();
  });
}

}  // namespace titan::model
