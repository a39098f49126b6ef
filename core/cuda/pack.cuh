// 16-byte vector access for memory-bound kernels (.cu only): a Pack<T> is 4 floats or 8 bf16s,
// moved with one 128-bit load or store, the width Hopper's memory system wants per thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::cuda {

template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <class T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  Pack<T> out;
  *reinterpret_cast<int4*>(&out) = *reinterpret_cast<const int4*>(p);
  return out;
}

template <class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& pack) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&pack);
}

// Whether a pointer may be read or written with Packs.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace titan::cuda
