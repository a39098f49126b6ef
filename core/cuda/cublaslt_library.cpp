// cuBLASLt, loaded when the first GEMM on a CUDA device needs it rather than when the process
// starts.
//
// libcublasLt is half a gigabyte whose static initialisers cost every process that links it
// about 0.4 s of start-up (measured on the 2-core CI VM), GPU or not: each rank of a CPU run,
// each refusal of bad input, each tool. So the binaries do not link it. They link these
// definitions of the entry points the project calls instead, each of which resolves the real
// one from libcublasLt.so.<CUBLAS_VER_MAJOR> (dlopen, on the loader's path: the toolkit's lib
// folder is the executables' RUNPATH, as for libcudart) the first time it is called. A missing
// library is an error naming it and what to do, thrown where the first GEMM would have run.
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/check.h"
#include "core/cuda/lazy_symbol.h"

namespace titan::cuda {
namespace {

const std::string kLibraryName = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

void* library() {
  static void* handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { handle = dlopen(kLibraryName.c_str(), RTLD_NOW | RTLD_LOCAL); });
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error(detail::concat("cannot load ", kLibraryName, " (", why ? why : "not found",
                               "): a GEMM on a CUDA device needs the CUDA toolkit's cuBLASLt; ",
                               "add its lib folder to LD_LIBRARY_PATH"));
  }
  return handle;
}

void* symbol(const char* name) {
  void* found = dlsym(library(), name);
  if (found == nullptr) {
    throw Error(detail::concat(kLibraryName, " has no ", name,
                               ": it is older than the cuBLAS this build was compiled against (",
                               CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, ")"));
  }
  return found;
}

}  // namespace
}  // namespace titan::cuda

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  return titan::cuda::call_lazily<&cublasLtCreate, titan::cuda::symbol>("cublasLtCreate", handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  return titan::cuda::call_lazily<&cublasLtMatmul, titan::cuda::symbol>(
      "cublasLtMatmul", handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
      workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  return titan::cuda::call_lazily<&cublasLtMatmulDescCreate, titan::cuda::symbol>(
      "cublasLtMatmulDescCreate", desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return titan::cuda::call_lazily<&cublasLtMatmulDescDestroy, titan::cuda::symbol>(
      "cublasLtMatmulDescDestroy", desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  return titan::cuda::call_lazily<&cublasLtMatmulDescSetAttribute, titan::cuda::symbol>(
      "cublasLtMatmulDescSetAttribute", desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  return titan::cuda::call_lazily<&cublasLtMatrixLayoutCreate, titan::cuda::symbol>(
      "cublasLtMatrixLayoutCreate", layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return titan::cuda::call_lazily<&cublasLtMatrixLayoutDestroy, titan::cuda::symbol>(
      "cublasLtMatrixLayoutDestroy", layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return titan::cuda::call_lazily<&cublasLtMatmulPreferenceCreate, titan::cuda::symbol>(
      "cublasLtMatmulPreferenceCreate", pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return titan::cuda::call_lazily<&cublasLtMatmulPreferenceDestroy, titan::cuda::symbol>(
      "cublasLtMatmulPreferenceDestroy", pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  return titan::cuda::call_lazily<&cublasLtMatmulPreferenceSetAttribute, titan::cuda::symbol>(
      "cublasLtMatmulPreferenceSetAttribute", pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  return titan::cuda::call_lazily<&cublasLtMatmulAlgoGetHeuristic, titan::cuda::symbol>(
      "cublasLtMatmulAlgoGetHeuristic", handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested,
      results, returned);
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  return titan::cuda::call_lazily<&cublasLtGetStatusName, titan::cuda::symbol>(
      "cublasLtGetStatusName", status);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  return titan::cuda::call_lazily<&cublasLtGetStatusString, titan::cuda::symbol>(
      "cublasLtGetStatusString", status);
}
