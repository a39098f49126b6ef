// Dtype dispatch for the CPU reference ops.
//
// The CPU twins are templates over their scalar type: float for training, double for the
// finite-difference gradient checks. visit_floating turns a tensor's runtime dtype into that
// template argument:
//
//   visit_floating(x.dtype(), "rmsnorm_forward", [&]<class T>() { rmsnorm_forward_cpu<T>(…); });
#pragma once

#include <functional>
#include <initializer_list>

#include "core/check.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace titan {

template <class F>
decltype(auto) visit_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    default: break;
  }
  TT_CHECK(false, op, ": the CPU path computes in f32 or f64, got ", dtype_name(dtype));
}

// Every tensor an op touches must live on the same device; the CPU twins check that it is the
// CPU before they dereference a pointer.
inline Device common_device(const char* op,
                            std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
  Device device = tensors.begin()->get().device();
  for (const Tensor& t : tensors) {
    TT_CHECK(t.device() == device, op, ": tensors on different devices (", device, " and ",
             t.device(), ")");
  }
  return device;
}

inline void require_cpu(const char* op,
                        std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
  Device device = common_device(op, tensors);
  TT_CHECK(device.is_cpu(), op, " on ", device, " needs a CUDA kernel this build does not have");
}

}  // namespace titan
