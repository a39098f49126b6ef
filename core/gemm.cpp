#include "core/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>

#include "core/cuda/backend.h"
#include "core/thread_pool.h"

namespace titan {

namespace {

GemmStats stats;

// Row stride of a 2-D GEMM operand, checking it is a matrix BLAS can address.
int64_t leading_dim(const Tensor& t, const char* name) {
  TT_CHECK(t.ndim() == 2, "gemm: operand ", name, " must be 2-D, got ", t);
  TT_CHECK(t.strides()[1] == 1 || t.size(1) == 1, "gemm: operand ", name,
           " needs unit stride along its last dim, got strides ", t.strides());
  TT_CHECK(t.strides()[0] >= t.size(1), "gemm: operand ", name, " has overlapping rows");
  return std::max<int64_t>(t.strides()[0], 1);
}

template <class T>
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, T alpha,
               const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    static_assert(std::is_same_v<T, double>, "gemm_cpu supports float and double");
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

template <class T>
void gemm_cpu(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha,
              const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  auto start = std::chrono::steady_clock::now();
  blas_gemm<T>(transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m,
               n, k, alpha, a, std::max<int64_t>(lda, 1), b, std::max<int64_t>(ldb, 1), beta, c,
               std::max<int64_t>(ldc, 1));
  stats.calls += 1;
  stats.flops += 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template void gemm_cpu<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                              const float*, int64_t, float, float*, int64_t);
template void gemm_cpu<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                               int64_t, const double*, int64_t, double, double*, int64_t);

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          double alpha, double beta) {
  int64_t lda = leading_dim(a, "A"), ldb = leading_dim(b, "B"), ldc = leading_dim(c, "C");
  int64_t m = transpose_a ? a.size(1) : a.size(0);
  int64_t k = transpose_a ? a.size(0) : a.size(1);
  int64_t kb = transpose_b ? b.size(1) : b.size(0);
  int64_t n = transpose_b ? b.size(0) : b.size(1);
  TT_CHECK(k == kb && c.size(0) == m && c.size(1) == n, "gemm: op(A) ", Shape{m, k}, " · op(B) ",
           Shape{kb, n}, " does not fit C ", c.shape());
  if (c.device().is_cuda()) {
    cuda_backend::gemm(a, transpose_a, b, transpose_b, c, alpha, beta);
    stats.calls += 1;  // seconds stay host-side only: a CUDA GEMM is asynchronous
    stats.flops += 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    return;
  }
  TT_CHECK(a.dtype() == b.dtype() && b.dtype() == c.dtype(), "gemm: dtypes differ: A ", a, ", B ",
           b, ", C ", c);
  TT_CHECK(a.device().is_cpu() && b.device().is_cpu(), "gemm: C on the CPU, A on ", a.device(),
           " and B on ", b.device());
  switch (c.dtype()) {
    case DType::F32:
      gemm_cpu<float>(transpose_a, transpose_b, m, n, k, static_cast<float>(alpha), a.data<float>(),
                      lda, b.data<float>(), ldb, static_cast<float>(beta), c.data<float>(), ldc);
      break;
    case DType::F64:
      gemm_cpu<double>(transpose_a, transpose_b, m, n, k, alpha, a.data<double>(), lda,
                       b.data<double>(), ldb, beta, c.data<double>(), ldc);
      break;
    default: TT_CHECK(false, "gemm: CPU GEMM supports f32 and f64, got ", dtype_name(c.dtype()));
  }
}

void gemv_rows(const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t lda = leading_dim(a, "A"), ldb = leading_dim(b, "B"), ldc = leading_dim(c, "C");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  TT_CHECK(b.size(1) == k && c.size(0) == m && c.size(1) == n, "gemv_rows: A ", a.shape(), " · B ",
           b.shape(), "ᵀ does not fit C ", c.shape());
  TT_CHECK(a.dtype() == b.dtype() && b.dtype() == c.dtype(), "gemv_rows: dtypes differ: A ", a,
           ", B ", b, ", C ", c);
  TT_CHECK(a.device().is_cpu() && b.device().is_cpu() && c.device().is_cpu(),
           "gemv_rows: CPU tensors only, got A on ", a.device(), ", B on ", b.device(), ", C on ",
           c.device());
  if (m == 0 || n == 0) return;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t row = 0; row < m; ++row) {
    switch (c.dtype()) {
      case DType::F32:
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b.data<float>(), ldb,
                    a.data<float>() + row * lda, 1, 0.0f, c.data<float>() + row * ldc, 1);
        break;
      case DType::F64:
        cblas_dgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0, b.data<double>(), ldb,
                    a.data<double>() + row * lda, 1, 0.0, c.data<double>() + row * ldc, 1);
        break;
      default: TT_CHECK(false, "gemv_rows: f32 and f64, got ", dtype_name(c.dtype()));
    }
  }
  stats.calls += 1;
  stats.flops += 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

GemmStats gemm_stats() { return stats; }

void reset_gemm_stats() { stats = {}; }

void set_cpu_gemm_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
  set_cpu_threads(threads);
}

}  // namespace titan
