// CUDA twin of model/ops/embedding.h.
//
// Forward is a gather: a grid-stride loop over (token, 16-byte piece of the row) copies the
// table row or writes zeros for another shard's token. Backward is a scatter-add: a block per
// token (grid-stride over tokens) adds dout[t] into its table row with fp32 atomicAdd. Repeated
// tokens make the adds race, which atomics resolve, but in no fixed order: the gradient's last
// bits vary between runs (torch's embedding backward on CUDA is not deterministic either). A
// block whose token belongs to another shard reads nothing of dout.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/embedding.h"

namespace titan::model {

namespace {

struct EmbeddingConfig {
  static constexpr int kThreads = 256;
  static constexpr int64_t kMaxBlocks = 65535LL * 16;
};

using cuda::aligned16;

template <class Unit>
__device__ __forceinline__ Unit zero_unit() {
  if constexpr (std::is_same_v<Unit, int4>)
    return make_int4(0, 0, 0, 0);
  else
    return cuda::store_as<Unit>(0.0f);
}

// A copy needs no arithmetic: Unit is int4 (16 bytes, whatever the dtype; dim then counts
// 16-byte units) or the element type itself when rows are not whole 16-byte units.
template <class Unit>
__global__ void embedding_forward_kernel(Unit* out, const Unit* weight, const int32_t* tokens,
                                         int64_t n_tokens, int64_t dim, int64_t vocab_start,
                                         int64_t vocab_local) {
  const int64_t units = n_tokens * dim;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < units;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = u / dim, d = u - t * dim;
    const int64_t row = static_cast<int64_t>(tokens[t]) - vocab_start;
    out[u] = row >= 0 && row < vocab_local ? weight[row * dim + d] : zero_unit<Unit>();
  }
}

template <class T>
__global__ void embedding_backward_kernel(float* dweight, const T* dout, const int32_t* tokens,
                                          int64_t n_tokens, int64_t dim, int64_t vocab_start,
                                          int64_t vocab_local) {
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t row = static_cast<int64_t>(tokens[t]) - vocab_start;
    if (row < 0 || row >= vocab_local) continue;  // uniform across the block
    float* dst = dweight + row * dim;
    const T* src = dout + t * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      atomicAdd(dst + d, cuda::load_f32(src[d]));
    }
  }
}

}  // namespace

void embedding_forward_cuda(const Tensor& out, const Tensor& weight, const Tensor& tokens,
                            int64_t vocab_start) {
  const int64_t n_tokens = tokens.numel(), dim = weight.size(1), vocab_local = weight.size(0);
  if (n_tokens == 0 || dim == 0) return;
  cuda::visit_cuda_floating(weight.dtype(), "embedding_forward", [&]<class T>() {
    T* out_ptr = cuda::device_ptr<T>(out);
    const T* weight_ptr = cuda::device_ptr<T>(weight);
    const int32_t* tokens_ptr = cuda::device_ptr<int32_t>(tokens);
    constexpr int kThreads = EmbeddingConfig::kThreads;
    cudaStream_t stream = cuda::current_stream();
    constexpr int64_t kPerUnit = sizeof(int4) / sizeof(T);
    if (dim % kPerUnit == 0 && aligned16(out_ptr) && aligned16(weight_ptr)) {
      const int64_t units = dim / kPerUnit;
      embedding_forward_kernel<int4>
          <<<cuda::grid_for(n_tokens * units, kThreads), kThreads, 0, stream>>>(
              reinterpret_cast<int4*>(out_ptr), reinterpret_cast<const int4*>(weight_ptr),
              tokens_ptr, n_tokens, units, vocab_start, vocab_local);
    } else {
      embedding_forward_kernel<T>
          <<<cuda::grid_for(n_tokens * dim, kThreads), kThreads, 0, stream>>>(
              out_ptr, weight_ptr, tokens_ptr, n_tokens, dim, vocab_start, vocab_local);
    }
    cuda::launch_check();
  });
}

void embedding_backward_cuda(const Tensor& dweight, const Tensor& dout, const Tensor& tokens,
                             int64_t vocab_start) {
  const int64_t n_tokens = tokens.numel(), dim = dweight.size(1), vocab_local = dweight.size(0);
  if (n_tokens == 0 || dim == 0) return;
  cuda::visit_cuda_floating(dout.dtype(), "embedding_backward", [&]<class T>() {
    const int threads =
        static_cast<int>(std::clamp<int64_t>((dim + 31) / 32 * 32, 32, EmbeddingConfig::kThreads));
    const unsigned blocks =
        static_cast<unsigned>(std::min<int64_t>(n_tokens, EmbeddingConfig::kMaxBlocks));
    embedding_backward_kernel<T><<<blocks, threads, 0, cuda::current_stream()>>>(
        cuda::device_ptr<float>(dweight), cuda::device_ptr<T>(dout),
        cuda::device_ptr<int32_t>(tokens), n_tokens, dim, vocab_start, vocab_local);
    cuda::launch_check();
  });
}

}  // namespace titan::model
