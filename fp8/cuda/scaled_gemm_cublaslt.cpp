// fp8/scaled_gemm.h on CUDA: out[M, N] (+)= A[M, K] · B[N, K]ᵀ through cuBLASLt's FP8 matmul,
// in the shape of NVIDIA's LtFp8Matmul sample: scale modes and scale pointers as descriptor
// attributes, one heuristic query per problem (cached in core/cuda/cublaslt.h's plan cache),
// an explicit error when there is no algorithm.
//
// Hopper's FP8 tensor cores take "TN" only: both operands K-contiguous, which is what a
// Float8Tensor is (scaled along its columns, the contraction axis). With the row-major →
// column-major swap of core/cuda/cublaslt.h, cuBLASLt's A is our B (stored K × N, transa = T)
// and its B is our A (stored K × M, transb = N); cuBLASLt's D [N × M] column-major is our
// out [M, N] row-major. The scale of cuBLASLt's A is therefore our B's, and vice versa.
//
// Pointers: the operands, the scale buffers and out are device memory; alpha and beta are host
// scalars (the default pointer mode).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <mutex>
#include <string>

#include "core/cuda/cublaslt.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "fp8/cuda/gemm_scales.h"
#include "fp8/scaled_gemm.h"

namespace titan::fp8 {

namespace {

cublasLtMatmulMatrixScale_t scale_mode(Granularity g) {
  switch (g) {
    case Granularity::Tensorwise: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case Granularity::Rowwise: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case Granularity::Block1x128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case Granularity::Block128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

const char* scale_mode_name(Granularity g) {
  switch (g) {
    case Granularity::Tensorwise: return "SCALAR_32F";
    case Granularity::Rowwise: return "OUTER_VEC_32F";
    case Granularity::Block1x128: return "VEC128_32F";
    case Granularity::Block128x128: return "BLK128x128_32F";
  }
  return "?";
}

cudaDataType_t fp8_type(Format f) { return f == Format::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

DType codes_dtype(Format f) { return f == Format::E4M3 ? DType::E4M3 : DType::E5M2; }

struct DeviceInfo {
  bool known = false;
  int major = 0, minor = 0;
  std::string name;
};

// Compute capability and name of the current device, queried once per device.
const DeviceInfo& current_device_info() {
  static std::mutex mutex;
  static std::array<DeviceInfo, 64> infos;
  const int device = cuda::current_device();
  TT_CHECK(device >= 0 && device < static_cast<int>(infos.size()), "CUDA device index ", device);
  std::lock_guard lock(mutex);
  DeviceInfo& info = infos[static_cast<size_t>(device)];
  if (!info.known) {
    cudaDeviceProp prop{};
    TT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    info = {true, prop.major, prop.minor, prop.name};
  }
  return info;
}

// FP8 tensor cores arrived with Ada (8.9); cuBLASLt's per-row (outer-vector) and 128-block
// scale modes are Hopper's (9.0, cuBLAS 12.9 and later).
void require_fp8_device(Granularity ga, Granularity gb) {
  const DeviceInfo& d = current_device_info();
  const int device = cuda::current_device();
  const int cc = d.major * 10 + d.minor;
  if (cc < 89) {
    input_error("FP8 GEMMs need compute capability 8.9 or newer (Ada/Hopper); cuda:", device,
                " is ", d.major, ".", d.minor, " (", d.name, "); set float8.enabled: false");
  }
  if ((ga != Granularity::Tensorwise || gb != Granularity::Tensorwise) && cc < 90) {
    input_error("FP8 GEMMs with ", granularity_name(ga), " × ", granularity_name(gb),
                " scaling need compute capability 9.0 (Hopper: cuBLASLt's outer-vector and "
                "128-block scale modes); cuda:",
                device, " is ", d.major, ".", d.minor, " (", d.name,
                "); use float8.recipe: tensorwise or set float8.enabled: false");
  }
}

void check_operand(const Float8Tensor& q, const char* which, Device device) {
  TT_CHECK(q.codes.device() == device && q.scales.device() == device, "scaled_gemm: ", which,
           " codes on ", q.codes.device(), " and scales on ", q.scales.device(), ", expected ",
           device);
  TT_CHECK(
      q.codes.ndim() == 2 && q.codes.is_contiguous() && q.codes.dtype() == codes_dtype(q.format),
      "scaled_gemm: ", which, " codes ", q.codes, " for a contiguous ", format_name(q.format),
      " operand");
}

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  TT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

}  // namespace

void scaled_gemm_cuda(const Float8Tensor& a, const Float8Tensor& b, const Tensor& out,
                      bool accumulate, bool fast_accumulation) {
  const int64_t M = a.rows(), N = b.rows(), K = a.cols();
  const Device device = a.codes.device();
  check_operand(a, "A", device);
  check_operand(b, "B", device);
  TT_CHECK(b.cols() == K, "scaled_gemm: A [", M, ", ", K, "] · B [", N, ", ", b.cols(), "]ᵀ");
  TT_CHECK(out.device() == device && out.ndim() == 2 && out.size(0) == M && out.size(1) == N &&
               out.is_contiguous() && (out.dtype() == DType::F32 || out.dtype() == DType::BF16),
           "scaled_gemm: output ", out, " on ", out.device(), " for [", M, ", ", N,
           "] f32 or bf16 on ", device);
  TT_CHECK(is_block(a.granularity) == is_block(b.granularity),
           "scaled_gemm: ", granularity_name(a.granularity), " A with ",
           granularity_name(b.granularity), " B: block scaling needs both operands block-scaled");
  TT_CHECK(
      !(a.granularity == Granularity::Block128x128 && b.granularity == Granularity::Block128x128),
      "scaled_gemm: cuBLASLt has no 128x128 × 128x128 block-scaled GEMM; quantize one "
      "operand in 1x128 blocks");
  TT_CHECK(a.format == Format::E4M3 || b.format == Format::E4M3,
           "scaled_gemm: cuBLASLt has no e5m2 × e5m2 FP8 GEMM; quantize one operand as e4m3");
  require_fp8_device(a.granularity, b.granularity);
  if (M % 16 != 0 || N % 16 != 0 || K % 16 != 0) {
    input_error("scaled_gemm: FP8 GEMM A [", M, ", ", K, "] · B [", N, ", ", K,
                "]ᵀ needs M, N and K multiples of 16 (cuBLASLt FP8); pad the dims or keep this "
                "GEMM in high precision (float8.filter_fqns or float8.auto_filter_small_kn)");
  }
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) out.zero_();
    return;
  }

  // Block scaling promotes the tensor cores' partial sums after every 128-wide K block anyway;
  // cuBLASLt (and PyTorch's _scaled_mm) refuse fast accumulation there, so it is not asked for.
  const bool fast = fast_accumulation && !is_block(a.granularity);
  const cudaDataType_t out_type = out.dtype() == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  // cuBLASLt's A is our B, its B our A.
  const Tensor scale_a = cublaslt_dequant_scales(b), scale_b = cublaslt_dequant_scales(a);
  const void* scale_a_ptr = scale_a.raw_data();
  const void* scale_b_ptr = scale_b.raw_data();
  cuda::OperandAlignment alignment{
      cuda::pointer_alignment(b.codes.raw_data()), cuda::pointer_alignment(a.codes.raw_data()),
      cuda::pointer_alignment(out.raw_data()), cuda::pointer_alignment(out.raw_data())};

  const cuda::PlanKey key{{2, M, N, K, static_cast<int64_t>(a.format),
                           static_cast<int64_t>(a.granularity), static_cast<int64_t>(b.format),
                           static_cast<int64_t>(b.granularity), static_cast<int64_t>(out.dtype()),
                           accumulate, fast, alignment.a, alignment.b, alignment.c}};
  cuda::MatmulPlan* plan = cuda::find_plan(key);
  if (plan == nullptr) {
    const std::string problem =
        detail::concat("fp8 gemm ", M, "x", N, "x", K, " A ", format_name(a.format), " ",
                       scale_mode_name(a.granularity), " B ", format_name(b.format), " ",
                       scale_mode_name(b.granularity), " -> ", dtype_name(out.dtype()),
                       accumulate ? " accumulate" : "", fast ? " fast-accum" : "", " align ",
                       alignment.a, ",", alignment.b, ",", alignment.c);
    auto fresh = std::make_unique<cuda::MatmulPlan>();
    TT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&fresh->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, scale_mode(b.granularity));
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, scale_mode(a.granularity));
    // The heuristic sees scale pointers of the right kind; each call sets its own below.
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a_ptr);
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b_ptr);
    set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(fast ? 1 : 0));
    fresh->a = cuda::row_major_layout(fp8_type(b.format), N, K, K);
    fresh->b = cuda::row_major_layout(fp8_type(a.format), M, K, K);
    fresh->c = cuda::row_major_layout(out_type, M, N, N);
    fresh->d = cuda::row_major_layout(out_type, M, N, N);
    cuda::choose_algorithm(*fresh, problem, alignment);
    plan = &cuda::insert_plan(key, std::move(fresh));
  }
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a_ptr);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b_ptr);

  // D = 1 · A·B (scaled) + beta · C with C = D: beta = 1 accumulates into out.
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cuda::Workspace workspace = cuda::cublaslt_workspace();
  TT_CUBLAS_CHECK(cublasLtMatmul(cuda::cublaslt_handle(), plan->desc, &alpha, b.codes.raw_data(),
                                 plan->a, a.codes.raw_data(), plan->b, &beta, out.raw_data(),
                                 plan->c, out.raw_data(), plan->d, &plan->algo, workspace.ptr,
                                 workspace.bytes, cuda::current_stream()));
}

}  // namespace titan::fp8
