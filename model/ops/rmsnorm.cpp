#include "model/ops/rmsnorm.h"

#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "core/unverified_gpu_paths.h"
#include "model/ops/tensor_math.h"

namespace titan::model {

namespace {

template <class T>
void rmsnorm_forward_cpu(T* y, T* rstd, const T* x, const T* weight, int64_t rows, int64_t dim,
                         double eps) {
  parallel_for_rows(rows, dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* xr = x + t * dim;
      double sum_sq = 0;
      for (int64_t d = 0; d < dim; ++d) sum_sq += static_cast<double>(xr[d]) * xr[d];
      T r = static_cast<T>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
      rstd[t] = r;
      T* yr = y + t * dim;
      for (int64_t d = 0; d < dim; ++d) yr[d] = xr[d] * r * weight[d];
    }
  });
}

// With x̂ = x·r and g = dy ⊙ weight:  dx = r · (g − x̂ · mean(g ⊙ x̂)),  dweight += Σ_t dy ⊙ x̂.
// dweight's sum over the rows goes chunk by chunk (core/thread_pool.h): each chunk's partial
// sum, then the partials added in chunk order, whatever thread ran which.
template <class T>
void rmsnorm_backward_cpu(T* dx, T* dweight, const T* dy, const T* x, const T* weight,
                          const T* rstd, int64_t rows, int64_t dim) {
  const int64_t grain = row_grain(dim);
  std::vector<T> partial(static_cast<size_t>(chunk_count(rows, grain) * dim), T(0));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    T* dw = partial.data() + begin / grain * dim;
    for (int64_t t = begin; t < end; ++t) {
      const T* xr = x + t * dim;
      const T* dyr = dy + t * dim;
      T r = rstd[t];
      double dot = 0;  // Σ_d g·x̂
      for (int64_t d = 0; d < dim; ++d) {
        dot += static_cast<double>(dyr[d] * weight[d]) * (xr[d] * r);
      }
      T mean_dot = static_cast<T>(dot / static_cast<double>(dim));
      T* dxr = dx + t * dim;
      for (int64_t d = 0; d < dim; ++d) {
        T xhat = xr[d] * r;
        dxr[d] = r * (dyr[d] * weight[d] - xhat * mean_dot);
        dw[d] += dyr[d] * xhat;
      }
    }
  });
  for (int64_t c = 0; c < chunk_count(rows, grain); ++c) {
    for (int64_t d = 0; d < dim; ++d) dweight[d] += partial[static_cast<size_t>(c * dim + d)];
  }
}

// Shapes, dtypes and one device for rmsnorm_forward's tensors; returns the device.
Device check_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight) {
  int64_t rows = x.size(0), dim = x.size(1);
  DType dt = x.dtype();
  // On CUDA the row statistics are f32 whatever the activations are.
  DType stat_dt = x.device().is_cuda() ? DType::F32 : dt;
  check_tensor(x, "rmsnorm x", {rows, dim}, dt);
  check_tensor(y, "rmsnorm y", {rows, dim}, dt);
  check_tensor(rstd, "rmsnorm rstd", {rows}, stat_dt);
  check_tensor(weight, "rmsnorm weight", {dim}, dt);
  return common_device("rmsnorm_forward", {y, rstd, x, weight});
}

// The same for rmsnorm_backward.
Device check_rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                              const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  int64_t rows = x.size(0), dim = x.size(1);
  DType dt = x.dtype();
  // On CUDA the row statistics and the weight gradient are f32 whatever the activations are.
  DType f32_on_cuda = x.device().is_cuda() ? DType::F32 : dt;
  check_tensor(x, "rmsnorm x", {rows, dim}, dt);
  check_tensor(dy, "rmsnorm dy", {rows, dim}, dt);
  check_tensor(dx, "rmsnorm dx", {rows, dim}, dt);
  check_tensor(rstd, "rmsnorm rstd", {rows}, f32_on_cuda);
  check_tensor(weight, "rmsnorm weight", {dim}, dt);
  check_tensor(dweight,
               x.device().is_cuda()
                   ? "rmsnorm dweight (f32 on CUDA: the gradient accumulates in fp32)"
                   : "rmsnorm dweight",
               {dim}, f32_on_cuda);
  return common_device("rmsnorm_backward", {dx, dweight, dy, x, weight, rstd});
}

}  // namespace

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     double eps) {
  int64_t rows = x.size(0), dim = x.size(1);
  DType dt = x.dtype();
  [[maybe_unused]] Device device = check_rmsnorm_forward(y, rstd, x, weight);
#if TITAN_CUDA
  if (device.is_cuda()) return rmsnorm_forward_cuda(y, rstd, x, weight, eps);
#endif
  require_cpu("rmsnorm_forward", {y, rstd, x, weight});
  visit_floating(dt, "rmsnorm_forward", [&]<class T>() {
    rmsnorm_forward_cpu<T>(y.data<T>(), rstd.data<T>(), x.data<T>(), weight.data<T>(), rows, dim,
                           eps);
  });
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& weight, const Tensor& rstd) {
  int64_t rows = x.size(0), dim = x.size(1);
  DType dt = x.dtype();
  [[maybe_unused]] Device device = check_rmsnorm_backward(dx, dweight, dy, x, weight, rstd);
#if TITAN_CUDA
  if (device.is_cuda()) return rmsnorm_backward_cuda(dx, dweight, dy, x, weight, rstd);
#endif
  require_cpu("rmsnorm_backward", {dx, dweight, dy, x, weight, rstd});
  visit_floating(dt, "rmsnorm_backward", [&]<class T>() {
    rmsnorm_backward_cpu<T>(dx.data<T>(), dweight.data<T>(), dy.data<T>(), x.data<T>(),
                            weight.data<T>(), rstd.data<T>(), rows, dim);
  });
}

void add_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& h,
                         const Tensor& residual, const Tensor& weight, double eps) {
  check_tensor(residual, "add_rmsnorm residual", h.shape(), h.dtype());
  [[maybe_unused]] Device device = check_rmsnorm_forward(y, rstd, h, weight);
  common_device("add_rmsnorm_forward", {h, residual});
#if TITAN_CUDA
  if (device.is_cuda() && unverified_gpu_path_allowed(UnverifiedGpuPath::FusedResidualNorm)) {
    return add_rmsnorm_forward_cuda(y, rstd, h, residual, weight, eps);
  }
#endif
  // The CPU twin is the composition itself, and so is CUDA's until the fused kernel has run on a
  // GPU (core/unverified_gpu_paths.h).
  accumulate(h, residual);
  rmsnorm_forward(y, rstd, h, weight, eps);
}

void rmsnorm_backward_add(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                          const Tensor& x, const Tensor& weight, const Tensor& rstd,
                          const Tensor& dresidual) {
  check_tensor(dresidual, "rmsnorm_backward_add dresidual", x.shape(), x.dtype());
  [[maybe_unused]] Device device = check_rmsnorm_backward(dx, dweight, dy, x, weight, rstd);
  common_device("rmsnorm_backward_add", {dx, dresidual});
#if TITAN_CUDA
  if (device.is_cuda() && unverified_gpu_path_allowed(UnverifiedGpuPath::FusedResidualNorm)) {
    return rmsnorm_backward_add_cuda(dx, dweight, dy, x, weight, rstd, dresidual);
  }
#endif
  rmsnorm_backward(dx, dweight, dy, x, weight, rstd);
  accumulate(dx, dresidual);
}

}  // namespace titan::model
