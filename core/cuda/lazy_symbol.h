// The entry points of a library the binaries load at its first use instead of linking it
// (cuBLASLt, cuDNN: core/cuda/cublaslt_library.cpp, cudnn_library.cpp): each definition calls the
// real one through this, which resolves it once.
#pragma once

namespace titan::cuda {

// Calls the library's `Entry` (whose declaration the caller also defines) with `args`, resolving
// it by `name` through `Resolve` (which throws when it cannot) the first time.
template <auto Entry, void* (*Resolve)(const char*), typename... Args>
auto call_lazily(const char* name, Args... args) {
  static const auto real = reinterpret_cast<decltype(Entry)>(Resolve(name));
  return real(args...);
}

}  // namespace titan::cuda
