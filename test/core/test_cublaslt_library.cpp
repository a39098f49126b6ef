// cuBLASLt is loaded at its first call (core/cuda/cublaslt_library.cpp), not at start-up: the
// library is absent from the process until then, and the entry points that need no device work
// through the loader on a machine without one.
#include <cublasLt.h>
#include <doctest/doctest.h>

#include <string>

#include "support/mapped_library.h"

TEST_SUITE("fast") {
  TEST_CASE("cuBLASLt: loaded at its first call and not at start-up") {
    REQUIRE_FALSE(titan::testing::library_mapped("libcublasLt.so"));
    CHECK(std::string(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS)) == "CUBLAS_STATUS_SUCCESS");
    CHECK(titan::testing::library_mapped("libcublasLt.so"));

    // Host-side descriptors: no device needed.
    cublasLtMatmulDesc_t desc = nullptr;
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
            CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t transpose = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                         sizeof(transpose)) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t layout = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 64, 32, 64) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref = nullptr;
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    const size_t workspace = size_t{1} << 20;
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace,
                                               sizeof(workspace)) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulPreferenceDestroy(pref) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatrixLayoutDestroy(layout) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);
    CHECK(std::string(cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).size() > 0);
  }
}
