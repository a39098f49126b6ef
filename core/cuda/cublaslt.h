// cuBLASLt plumbing shared by the bf16 GEMM (core/cuda/gemm_cublaslt.cpp) and the FP8 scaled
// GEMM (fp8/cuda/): one handle and one 32 MiB workspace per device, both created once, and a
// cache of matmul plans (descriptors + the heuristic's algorithm) keyed per problem, so that
// the heuristic runs once per shape instead of once per call.
//
// Row-major convention: the project's GEMMs are row-major, cuBLASLt is column-major; a
// row-major C[M, N] = op(A)·op(B) is issued as the column-major Cᵀ[N, M] = op(B)ᵀ·op(A)ᵀ,
// i.e. with the operands swapped and no data moved.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace titan::cuda {

// TT_CUBLAS_CHECK(call): throws an Error naming the call and the cuBLAS status.
void cublas_check_failed(const char* call, int status, const char* file, int line);
#define TT_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    cublasStatus_t tt_cublas_status = (call);                                          \
    if (tt_cublas_status != CUBLAS_STATUS_SUCCESS) [[unlikely]]                        \
      ::titan::cuda::cublas_check_failed(#call, tt_cublas_status, __FILE__, __LINE__); \
  } while (0)

cublasLtHandle_t cublaslt_handle();  // for the current device

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
// Allocated once per device (cudaMalloc, outside the tensor allocator's accounting).
Workspace cublaslt_workspace();

// Descriptors of one matmul problem and the algorithm the heuristic chose for it.
struct MatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  MatmulPlan() = default;
  ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;
};

// The alignment the heuristic may assume of the operands' pointers (each up to 256 bytes). It
// is part of a plan's key: a view into a fused buffer may be less aligned than a fresh tensor.
struct OperandAlignment {
  uint32_t a = 256, b = 256, c = 256, d = 256;
};
uint32_t pointer_alignment(const void* ptr);

// Runs cuBLASLt's heuristic for a plan whose descriptors are set and stores the best
// algorithm; throws an Error naming `problem` (shapes, types, scale modes) when cuBLASLt has
// none, instead of letting the matmul fail later with a bare status code.
void choose_algorithm(MatmulPlan& plan, const std::string& problem, OperandAlignment alignment);

// What tells matmul problems apart — kind, shapes, leading dims, types, modes, transposes,
// operand alignments — as plain numbers, so that finding a call's plan costs a hash of 16
// integers, not formatting a string. Unused fields stay 0.
struct PlanKey {
  std::array<int64_t, 16> fields{};
  friend bool operator==(const PlanKey&, const PlanKey&) = default;
};

// The plan cached under `key` for the current device, or null.
MatmulPlan* find_plan(const PlanKey& key);
MatmulPlan& insert_plan(const PlanKey& key, std::unique_ptr<MatmulPlan> plan);

// Column-major layout of a row-major [rows, cols] operand with row stride `ld` (elements).
cublasLtMatrixLayout_t row_major_layout(cudaDataType_t type, int64_t rows, int64_t cols,
                                        int64_t ld);

}  // namespace titan::cuda
