// core/gemm.h on CUDA: bf16 (or exact f32) GEMMs through cuBLASLt with fp32 accumulation.
#include <cublasLt.h>

#include "core/cuda/backend.h"
#include "core/cuda/cublaslt.h"
#include "core/cuda/stream.h"

namespace titan::cuda_backend {

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    default: TT_CHECK(false, "gemm on CUDA takes bf16 or f32 operands, got ", dtype_name(dtype));
  }
}

int64_t row_stride(const Tensor& t) { return std::max<int64_t>(t.strides()[0], t.size(1)); }

}  // namespace

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          double alpha, double beta) {
  TT_CHECK(a.device() == c.device() && b.device() == c.device(), "gemm: operands on ", a.device(),
           ", ", b.device(), " and ", c.device());
  TT_CHECK(a.dtype() == b.dtype() && (c.dtype() == a.dtype() || c.dtype() == DType::F32),
           "gemm on CUDA: A and B must share a dtype and C be that dtype or f32; got ", a, ", ", b,
           ", ", c);
  int64_t m = c.size(0), n = c.size(1), k = transpose_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  int64_t lda = row_stride(a), ldb = row_stride(b), ldc = row_stride(c);
  cudaDataType_t ab_type = cuda_type(a.dtype()), c_type = cuda_type(c.dtype());
  cuda::OperandAlignment alignment{
      cuda::pointer_alignment(b.raw_data()), cuda::pointer_alignment(a.raw_data()),
      cuda::pointer_alignment(c.raw_data()), cuda::pointer_alignment(c.raw_data())};

  const cuda::PlanKey key{{1, static_cast<int64_t>(a.dtype()), static_cast<int64_t>(c.dtype()),
                           transpose_a, transpose_b, m, n, k, lda, ldb, ldc, alignment.a,
                           alignment.b, alignment.c}};
  cuda::MatmulPlan* plan = cuda::find_plan(key);
  if (plan == nullptr) {
    const std::string problem = detail::concat(
        "gemm ", dtype_name(a.dtype()), "->", dtype_name(c.dtype()), transpose_a ? " T" : " N",
        transpose_b ? "T " : "N ", m, "x", n, "x", k, " ld ", lda, ",", ldb, ",", ldc, " align ",
        alignment.a, ",", alignment.b, ",", alignment.c);
    auto fresh = std::make_unique<cuda::MatmulPlan>();
    TT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&fresh->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major Cᵀ = op(B)ᵀ · op(A)ᵀ: cuBLASLt's A is our B and its B is our A.
    cublasOperation_t op_a = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    TT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                   sizeof(op_a)));
    TT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                   sizeof(op_b)));
    fresh->a = cuda::row_major_layout(ab_type, b.size(0), b.size(1), ldb);
    fresh->b = cuda::row_major_layout(ab_type, a.size(0), a.size(1), lda);
    fresh->c = cuda::row_major_layout(c_type, m, n, ldc);
    fresh->d = cuda::row_major_layout(c_type, m, n, ldc);
    cuda::choose_algorithm(*fresh, problem, alignment);
    plan = &cuda::insert_plan(key, std::move(fresh));
  }
  float alpha32 = static_cast<float>(alpha), beta32 = static_cast<float>(beta);
  cuda::Workspace workspace = cuda::cublaslt_workspace();
  TT_CUBLAS_CHECK(cublasLtMatmul(cuda::cublaslt_handle(), plan->desc, &alpha32, b.raw_data(),
                                 plan->a, a.raw_data(), plan->b, &beta32, c.raw_data(), plan->c,
                                 c.raw_data(), plan->d, &plan->algo, workspace.ptr, workspace.bytes,
                                 cuda::current_stream()));
}

}  // namespace titan::cuda_backend
