#include "model/ops/swiglu.h"

#include <cmath>

#include "core/dispatch.h"
#include "core/thread_pool.h"

namespace titan::model {

namespace {

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <class T>
void swiglu_forward_cpu(T* out, const T* h13, int64_t rows, int64_t ffn) {
  parallel_for_rows(rows, ffn, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* h1 = h13 + t * 2 * ffn;
      const T* h3 = h1 + ffn;
      T* o = out + t * ffn;
      for (int64_t f = 0; f < ffn; ++f) o[f] = h1[f] * sigmoid(h1[f]) * h3[f];
    }
  });
}

// d silu(x)/dx = σ(x)·(1 + x·(1 − σ(x)))
template <class T>
void swiglu_backward_cpu(T* dh13, const T* dout, const T* h13, int64_t rows, int64_t ffn) {
  parallel_for_rows(rows, ffn, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* h1 = h13 + t * 2 * ffn;
      const T* h3 = h1 + ffn;
      T* dh1 = dh13 + t * 2 * ffn;
      T* dh3 = dh1 + ffn;
      const T* d = dout + t * ffn;
      for (int64_t f = 0; f < ffn; ++f) {
        T s = sigmoid(h1[f]);
        dh1[f] = d[f] * h3[f] * s * (T(1) + h1[f] * (T(1) - s));
        dh3[f] = d[f] * h1[f] * s;
      }
    }
  });
}

}  // namespace

void swiglu_forward(const Tensor& out, const Tensor& h13) {
  TT_CHECK(h13.ndim() == 2 && h13.size(1) % 2 == 0, "swiglu: h13 must be [T, 2F], got ", h13);
  int64_t rows = h13.size(0), ffn = h13.size(1) / 2;
  check_tensor(h13, "swiglu h13", {rows, 2 * ffn}, h13.dtype());
  check_tensor(out, "swiglu out", {rows, ffn}, h13.dtype());
  [[maybe_unused]] Device device = common_device("swiglu_forward", {out, h13});
#if TITAN_CUDA
  if (device.is_cuda()) return swiglu_forward_cuda(out, h13);
#endif
  require_cpu("swiglu_forward", {out, h13});
  visit_floating(h13.dtype(), "swiglu_forward", [&]<class T>() {
    swiglu_forward_cpu<T>(out.data<T>(), h13.data<T>(), rows, ffn);
  });
}

void swiglu_backward(const Tensor& dh13, const Tensor& dout, const Tensor& h13) {
  TT_CHECK(h13.ndim() == 2 && h13.size(1) % 2 == 0, "swiglu: h13 must be [T, 2F], got ", h13);
  int64_t rows = h13.size(0), ffn = h13.size(1) / 2;
  check_tensor(h13, "swiglu h13", {rows, 2 * ffn}, h13.dtype());
  check_tensor(dh13, "swiglu dh13", {rows, 2 * ffn}, h13.dtype());
  check_tensor(dout, "swiglu dout", {rows, ffn}, h13.dtype());
  [[maybe_unused]] Device device = common_device("swiglu_backward", {dh13, dout, h13});
#if TITAN_CUDA
  if (device.is_cuda()) return swiglu_backward_cuda(dh13, dout, h13);
#endif
  require_cpu("swiglu_backward", {dh13, dout, h13});
  visit_floating(h13.dtype(), "swiglu_backward", [&]<class T>() {
    swiglu_backward_cpu<T>(dh13.data<T>(), dout.data<T>(), h13.data<T>(), rows, ffn);
  });
}

}  // namespace titan::model
