// The one entry point for matrix multiplication: OpenBLAS on the CPU, cuBLASLt on CUDA.
//
//   C[M, N] = alpha * op(A) · op(B) + beta * C      (row-major; op(X) = X or Xᵀ)
//
// A linear y = x·Wᵀ with W stored [out, in] (PyTorch's layout) is gemm(x, false, w, true, y);
// its gradients are gemm(dy, false, w, false, dx) and gemm(dy, true, x, false, dw, 1, 1).
// Operands are 2-D with unit stride along their last dim; the row stride may exceed the row
// length, so a column block of a fused buffer (the K heads inside wqkv's output) needs no copy.
//
// On CUDA (C on a CUDA device) A and B are bf16 with C bf16 or f32, or all three f32; the
// product accumulates in fp32 (core/cuda/gemm_cublaslt.cpp).
//
// Every call is counted (calls, FLOPs, seconds) so that the trainer can report which share of
// a step the GEMMs take.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace titan {

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          double alpha = 1.0, double beta = 0.0);

// The same on raw row-major pointers (lda/ldb/ldc are row strides in elements), for kernels
// that loop over many small GEMMs. T is float or double. Call from one thread at a time:
// OpenBLAS threads inside the call, and the counters below are not atomic.
template <class T>
void gemm_cpu(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha,
              const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// C[M, N] = A[M, K] · B[N, K]ᵀ one row at a time, each row one BLAS matrix-vector product
// (cblas_sgemv/dgemv); CPU, f32 or f64, contiguous rows. For a linear of a few rows — the decode
// steps of text generation (model/inference/decoder.h) — where OpenBLAS's sgemm packs all of B
// on every call: at M = 1 that costs 4–5× reading B once (OpenBLAS 0.3.21 on the 2-core VM;
// the two meet near M = 4). Counted in gemm_stats like gemm.
void gemv_rows(const Tensor& a, const Tensor& b, const Tensor& c);

struct GemmStats {
  int64_t calls = 0;
  double flops = 0;    // 2·M·N·K per call
  double seconds = 0;  // wall time inside the GEMM library
};

GemmStats gemm_stats();
void reset_gemm_stats();

// Threads OpenBLAS may use (e.g. cores / ranks per node, so that ranks do not oversubscribe), and
// as many for the CPU work beside the GEMMs (core/thread_pool.h).
void set_cpu_gemm_threads(int threads);

}  // namespace titan
