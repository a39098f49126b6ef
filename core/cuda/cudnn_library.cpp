// cuDNN, loaded at the first attention on a GPU rather than when the process starts.
//
// As with cuBLASLt (cublaslt_library.cpp), the binaries do not link libcudnn: its libraries are
// over half a gigabyte a CPU process has no use for. They link these definitions of the entry
// points the project calls instead (the declarations are cudnn_graph.h's), each of which resolves
// the real one from libcudnn.so.9 the first time it is called. Unlike cuBLASLt, a machine
// without cuDNN is not an error: cudnn_library() says so, and the attention runs its native
// kernel. Calling an entry point when the library is not usable throws the reason.
#include "core/cuda/cudnn_library.h"

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/cuda/lazy_symbol.h"

namespace titan::cuda {
// Named, not anonymous: in a unity batch beside cublaslt_library.cpp, whose helpers have the
// same names.
namespace cudnn_loading {

const std::string kLibraryName = "libcudnn.so." + std::to_string(CUDNN_MAJOR);

// What to dlopen: TITAN_CUDNN_LIBRARY as a file, or the library inside it as a folder; else the
// bare name, for the loader's path.
std::string library_path() {
  const char* env = std::getenv("TITAN_CUDNN_LIBRARY");
  if (env == nullptr || *env == '\0') return kLibraryName;
  struct stat st {};
  if (stat(env, &st) == 0 && S_ISDIR(st.st_mode)) return std::string(env) + "/" + kLibraryName;
  return env;
}

void* handle = nullptr;

CudnnLibrary load() {
  CudnnLibrary lib;
  lib.path = library_path();
  handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    lib.why_not = detail::concat(
        "cannot load ", lib.path, " (", why ? why : "not found",
        "): put cuDNN 9's lib folder on LD_LIBRARY_PATH or name it in TITAN_CUDNN_LIBRARY (pip's "
        "nvidia-cudnn-cu13 has it in <site-packages>/nvidia/cudnn/lib)");
    return lib;
  }
  auto version = reinterpret_cast<size_t (*)()>(dlsym(handle, "cudnnGetVersion"));
  if (version == nullptr) {
    lib.why_not = detail::concat(lib.path, " has no cudnnGetVersion: it is not cuDNN 9");
    return lib;
  }
  lib.version = version();
  if (lib.version < kCudnnMinVersion || lib.version / 10000 != CUDNN_MAJOR) {
    lib.why_not = detail::concat(lib.path, " is cuDNN ", cudnn_version_text(lib.version),
                                 "; the attention backend needs cuDNN ", CUDNN_MAJOR, ".x from ",
                                 cudnn_version_text(kCudnnMinVersion),
                                 " (this build's headers are ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".",
                                 CUDNN_PATCHLEVEL, "); install a newer nvidia-cudnn-cu13");
    return lib;
  }
  lib.why_not = missing_cudnn_dependency(cudnn_dependencies(), [](const std::string& name) {
    // Kept loaded: cuDNN loads the same soname and finds it already in the process.
    return dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL) != nullptr;
  });
  if (!lib.why_not.empty()) {
    lib.why_not = detail::concat(lib.path, " is cuDNN ", cudnn_version_text(lib.version), ", but ",
                                 lib.why_not);
    return lib;
  }
  lib.usable = true;
  return lib;
}

void* symbol(const char* name) {
  const CudnnLibrary& lib = cudnn_library();
  if (!lib.usable) throw Error(detail::concat("cuDNN is not usable: ", lib.why_not));
  void* found = dlsym(handle, name);
  if (found == nullptr) {
    throw Error(detail::concat(lib.path, " (cuDNN ", cudnn_version_text(lib.version), ") has no ",
                               name,
                               ": it is older than the cuDNN this build was compiled against (",
                               CUDNN_MAJOR, ".", CUDNN_MINOR, ")"));
  }
  return found;
}

}  // namespace cudnn_loading

const CudnnLibrary& cudnn_library() {
  static CudnnLibrary lib;
  static std::once_flag once;
  std::call_once(once, [] { lib = cudnn_loading::load(); });
  return lib;
}

std::vector<std::string> cudnn_dependencies() {
  const std::string major = std::to_string(CUDART_VERSION / 1000);
  return {"libnvrtc.so." + major, "libcublasLt.so." + major, "libcublas.so." + major};
}

std::string missing_cudnn_dependency(const std::vector<std::string>& dependencies,
                                     const std::function<bool(const std::string&)>& loads) {
  for (const std::string& name : dependencies) {
    if (loads(name)) continue;
    return detail::concat(
        name, ", which its attention engines load, does not load: put the CUDA toolkit's lib "
        "folder (or pip's nvidia/cuda_nvrtc/lib and nvidia/cublas/lib) on LD_LIBRARY_PATH");
  }
  return {};
}

std::string cudnn_version_text(size_t version) {
  return detail::concat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

}  // namespace titan::cuda

size_t CUDNNWINAPI cudnnGetVersion(void) {
  return titan::cuda::call_lazily<&cudnnGetVersion, titan::cuda::cudnn_loading::symbol>(
      "cudnnGetVersion");
}

const char* CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
  return titan::cuda::call_lazily<&cudnnGetErrorString, titan::cuda::cudnn_loading::symbol>(
      "cudnnGetErrorString", status);
}

void CUDNNWINAPI cudnnGetLastErrorString(char* message, size_t max_size) {
  titan::cuda::call_lazily<&cudnnGetLastErrorString, titan::cuda::cudnn_loading::symbol>(
      "cudnnGetLastErrorString", message, max_size);
}

cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t* handle) {
  return titan::cuda::call_lazily<&cudnnCreate, titan::cuda::cudnn_loading::symbol>("cudnnCreate",
                                                                                    handle);
}

cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) {
  return titan::cuda::call_lazily<&cudnnDestroy, titan::cuda::cudnn_loading::symbol>("cudnnDestroy",
                                                                                     handle);
}

cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  return titan::cuda::call_lazily<&cudnnSetStream, titan::cuda::cudnn_loading::symbol>(
      "cudnnSetStream", handle, stream);
}

cudnnStatus_t CUDNNWINAPI cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                       cudnnBackendDescriptor_t* descriptor) {
  return titan::cuda::call_lazily<&cudnnBackendCreateDescriptor,
                                  titan::cuda::cudnn_loading::symbol>(
      "cudnnBackendCreateDescriptor", type, descriptor);
}

cudnnStatus_t CUDNNWINAPI cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  return titan::cuda::call_lazily<&cudnnBackendDestroyDescriptor,
                                  titan::cuda::cudnn_loading::symbol>(
      "cudnnBackendDestroyDescriptor", descriptor);
}

cudnnStatus_t CUDNNWINAPI cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  return titan::cuda::call_lazily<&cudnnBackendFinalize, titan::cuda::cudnn_loading::symbol>(
      "cudnnBackendFinalize", descriptor);
}

cudnnStatus_t CUDNNWINAPI cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                                   cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t count,
                                                   const void* elements) {
  return titan::cuda::call_lazily<&cudnnBackendSetAttribute, titan::cuda::cudnn_loading::symbol>(
      "cudnnBackendSetAttribute", descriptor, name, type, count, elements);
}

cudnnStatus_t CUDNNWINAPI cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                                   cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type,
                                                   int64_t requested, int64_t* count,
                                                   void* elements) {
  return titan::cuda::call_lazily<&cudnnBackendGetAttribute, titan::cuda::cudnn_loading::symbol>(
      "cudnnBackendGetAttribute", descriptor, name, type, requested, count, elements);
}

cudnnStatus_t CUDNNWINAPI cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                              cudnnBackendDescriptor_t variant_pack) {
  return titan::cuda::call_lazily<&cudnnBackendExecute, titan::cuda::cudnn_loading::symbol>(
      "cudnnBackendExecute", handle, plan, variant_pack);
}
