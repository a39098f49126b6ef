// cuDNN is optional where cuBLASLt is not: the attention has a native kernel of its own, so a
// machine without libcudnn runs that one (model.attention_backend: auto) instead of failing.
// This header says whether the library could be loaded, from where, at which version, and if
// not why; core/cuda/cudnn_library.cpp loads it on the first question (a GPU process's first
// attention), never at start-up, so a CPU process never maps it.
//
// Where it is looked for, in order:
//   TITAN_CUDNN_LIBRARY  the library file, or the folder holding libcudnn.so.9 (pip's
//                        nvidia-cudnn-cu13 puts it in <site-packages>/nvidia/cudnn/lib)
//   the loader's path    LD_LIBRARY_PATH, then the executables' RUNPATH, which holds the CUDA
//                        toolkit's lib folder (where the toolkit's own cuDNN lives)
// libcudnn.so.9 is cuDNN 9's small front library: it exports every entry point called here and
// forwards them to libcudnn_graph.so.9 (the backend API), which loads the engine libraries
// (libcudnn_engines_*.so.9, libcudnn_heuristic.so.9) from its own folder.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace titan::cuda {

// The oldest cuDNN the attention backend runs on: 9.15.1. Older 9.x builds lack the causal
// masks of a sequence's chunks (bottom-right alignment before 9.6), 9.10.0/9.10.1 have known
// wrong results in their bf16 attention, and 9.10.2 to 9.15.0 a wrong backward where S_kv is not
// a multiple of 128 (cudnn-frontend's support checks say so).
inline constexpr size_t kCudnnMinVersion = 91501;

// What cuDNN's attention engines load on their own, by soname for this build's CUDA major: the
// flash-attention engines are compiled at run time (NVRTC), and its graph library calls cuBLAS.
// Missing, cuDNN loads and finalizes graphs but fails at the first plan, far from the cause.
std::vector<std::string> cudnn_dependencies();

// The first of `dependencies` that `loads` (a dlopen, or a test's stand-in) cannot load, as one
// line saying what to do; empty when all load.
std::string missing_cudnn_dependency(const std::vector<std::string>& dependencies,
                                     const std::function<bool(const std::string&)>& loads);

struct CudnnLibrary {
  bool usable = false;  // loaded, at least kCudnnMinVersion, and its dependencies load
  std::string path;     // what dlopen was given
  size_t version = 0;   // cudnnGetVersion(): major·10000 + minor·100 + patch; 0 if not loaded
  std::string why_not;  // when not usable: one line saying what failed and what to do
};

// Loads libcudnn.so.9 the first time it is called and checks its version and dependencies;
// never throws.
const CudnnLibrary& cudnn_library();

// "9.19.0" for 91900.
std::string cudnn_version_text(size_t version);

}  // namespace titan::cuda
