#include "model/ops/tensor_math.h"

#include "core/dispatch.h"

namespace titan::model {

void accumulate(const Tensor& acc, const Tensor& x) {
  check_tensor(x, "accumulate x", acc.shape(), acc.dtype());
  check_tensor(acc, "accumulate acc", acc.shape(), acc.dtype());
  [[maybe_unused]] Device device = common_device("accumulate", {acc, x});
#if TITAN_CUDA
  if (device.is_cuda()) return accumulate_cuda(acc, x);
#endif
  require_cpu("accumulate", {acc, x});
  visit_floating(acc.dtype(), "accumulate", [&]<class T>() {
    T* a = acc.data<T>();
    const T* b = x.data<T>();
    for (int64_t i = 0; i < acc.numel(); ++i) a[i] += b[i];
  });
}

void scale_inplace(const Tensor& t, double factor) {
  check_tensor(t, "scale_inplace", t.shape(), t.dtype());
  [[maybe_unused]] Device device = common_device("scale_inplace", {t});
#if TITAN_CUDA
  if (device.is_cuda()) return scale_inplace_cuda(t, factor);
#endif
  require_cpu("scale_inplace", {t});
  visit_floating(t.dtype(), "scale_inplace", [&]<class T>() {
    T* p = t.data<T>();
    const T f = static_cast<T>(factor);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= f;
  });
}

double sum_of_squares(const Tensor& t) { return sums_of_squares({t}).front(); }

std::vector<double> sums_of_squares(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return {};
  for (const Tensor& t : tensors) {
    check_tensor(t, "sum_of_squares", t.shape(), t.dtype());
    common_device("sum_of_squares", {tensors.front(), t});
  }
#if TITAN_CUDA
  if (tensors.front().device().is_cuda()) return sums_of_squares_cuda(tensors);
#endif
  require_cpu("sum_of_squares", {tensors.front()});  // and so every one: they share its device
  std::vector<double> sums;
  sums.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    sums.push_back(visit_floating(t.dtype(), "sum_of_squares", [&]<class T>() {
      const T* p = t.data<T>();
      double sum = 0;
      for (int64_t i = 0; i < t.numel(); ++i) sum += static_cast<double>(p[i]) * p[i];
      return sum;
    }));
  }
  return sums;
}

}  // namespace titan::model
