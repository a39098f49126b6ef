// CUDA twin of model/ops/init_values.h.
//
// A grid-stride loop, one element a thread and turn: the element's Philox block, the normal
// transform of core/philox.h (which spells every double operation as its own __d*_rn, so nvcc
// fuses nothing and the bits are the host's), the scale by std, and one store. The work is
// fp64 arithmetic and integer multiplies with one write a value, far from the memory bound; a
// truncated normal loops over draws until one lands inside, which diverges a warp rarely
// (core/philox.h says how rarely for this model's cuts).
#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/philox.h"
#include "model/ops/init_values.h"

namespace titan::model {

namespace {

struct InitValuesConfig {
  static constexpr int kThreads = 256;
};

// The double rounded to f32, then (bf16 storage) to bf16: the CPU twin's two roundings.
template <class T>
__device__ __forceinline__ T store_value(double v) {
  return cuda::store_as<T>(__double2float_rn(v));
}

template <class T, InitKind kKind>
__global__ void init_values_kernel(T* out, int64_t n, InitBlock b, uint32_t k0, uint32_t k1,
                                   double std, double lo, double hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / b.width;
    const auto index =
        static_cast<uint64_t>((b.row_begin + r) * b.cols + b.col_begin + i - r * b.width);
    double v = 1.0;
    if constexpr (kKind == InitKind::Zeros) {
      v = 0.0;
    } else if constexpr (kKind == InitKind::Normal) {
      v = philox::mul(std, philox::normal_at(k0, k1, index, 0));
    } else if constexpr (kKind == InitKind::TruncatedNormal) {
      v = philox::mul(std, philox::truncated_normal_at(k0, k1, index, lo, hi));
    }
    out[i] = store_value<T>(v);
  }
}

}  // namespace

void init_values_cuda(const Tensor& dst, const InitSpec& init, const CounterRng& rng,
                      const InitBlock& block) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const PhiloxKey key = rng.key();
  const double lo = -init.cutoff / init.std, hi = init.cutoff / init.std;
  cuda::visit_cuda_floating(dst.dtype(), "init_values", [&]<class T>() {
    T* out = cuda::device_ptr<T>(dst);
    constexpr int kThreads = InitValuesConfig::kThreads;
    const unsigned blocks = cuda::grid_for(n, kThreads);
    cudaStream_t stream = cuda::current_stream();
    switch (init.kind) {
      case InitKind::Zeros:
        init_values_kernel<T, InitKind::Zeros>
            <<<blocks, kThreads, 0, stream>>>(out, n, block, key[0], key[1], init.std, lo, hi);
        break;
      case InitKind::Ones:
        init_values_kernel<T, InitKind::Ones>
            <<<blocks, kThreads, 0, stream>>>(out, n, block, key[0], key[1], init.std, lo, hi);
        break;
      case InitKind::Normal:
        init_values_kernel<T, InitKind::Normal>
            <<<blocks, kThreads, 0, stream>>>(out, n, block, key[0], key[1], init.std, lo, hi);
        break;
      case InitKind::TruncatedNormal:
        init_values_kernel<T, InitKind::TruncatedNormal>
            <<<blocks, kThreads, 0, stream>>>(out, n, block, key[0], key[1], init.std, lo, hi);
        break;
    }
    cuda::launch_check();
  });
}

}  // namespace titan::model
