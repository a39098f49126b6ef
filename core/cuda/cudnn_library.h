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
#include <string>

namespace titan::cuda {

// The oldest cuDNN the attention backend runs on: 9.10.2. Older 9.x builds lack the causal
// masks of a sequence's chunks (bottom-right alignment before 9.6) and 9.10.0/9.10.1 have
// known wrong results in their bf16 attention (cudnn-frontend's support checks say so).
inline constexpr size_t kCudnnMinVersion = 91002;

struct CudnnLibrary {
  bool usable = false;  // loaded and at least kCudnnMinVersion
  std::string path;     // what dlopen was given
  size_t version = 0;   // cudnnGetVersion(): major·10000 + minor·100 + patch; 0 if not loaded
  std::string why_not;  // when not usable: one line saying what failed and what to do
};

// Loads libcudnn.so.9 the first time it is called and checks its version; never throws.
const CudnnLibrary& cudnn_library();

// "9.19.0" for 91900.
std::string cudnn_version_text(size_t version);

}  // namespace titan::cuda
