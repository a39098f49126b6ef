#include "model/ops/tensor_math.h"

#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"

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
    parallel_for(acc.numel(), kElementsPerChunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) a[i] += b[i];
    });
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
    parallel_for(t.numel(), kElementsPerChunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] *= f;
    });
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
  // Each tensor in chunks of kElementsPerChunk, every chunk of every tensor one item for the
  // threads; a tensor's sum adds its chunks' partial sums in chunk order.
  std::vector<int64_t> first_chunk{0};
  for (const Tensor& t : tensors) {
    first_chunk.push_back(first_chunk.back() + chunk_count(t.numel(), kElementsPerChunk));
  }
  std::vector<double> partial(static_cast<size_t>(first_chunk.back()), 0.0);
  parallel_for(first_chunk.back(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t i = static_cast<size_t>(
          std::upper_bound(first_chunk.begin(), first_chunk.end(), c) - first_chunk.begin() - 1);
      const Tensor& t = tensors[i];
      const int64_t lo = (c - first_chunk[i]) * kElementsPerChunk;
      const int64_t hi = std::min(t.numel(), lo + kElementsPerChunk);
      partial[static_cast<size_t>(c)] = visit_floating(t.dtype(), "sum_of_squares", [&]<class T>() {
        const T* p = t.data<T>();
        double sum = 0;
        for (int64_t k = lo; k < hi; ++k) sum += static_cast<double>(p[k]) * p[k];
        return sum;
      });
    }
  });
  std::vector<double> sums(tensors.size(), 0.0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (int64_t c = first_chunk[i]; c < first_chunk[i + 1]; ++c) {
      sums[i] += partial[static_cast<size_t>(c)];
    }
  }
  return sums;
}

}  // namespace titan::model
