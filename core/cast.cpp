#include "core/cast.h"

#include <cstdint>

#include "core/bf16.h"
#include "core/cuda/backend.h"

namespace titan {

namespace {

double load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data<float>()[i];
    case DType::F64: return t.data<double>()[i];
    case DType::BF16: return bf16_to_float(t.data<bf16_t>()[i]);
    case DType::I32: return t.data<int32_t>()[i];
    default: TT_CHECK(false, "cast from ", dtype_name(t.dtype()), " is not supported");
  }
}

void store(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::F64: t.data<double>()[i] = v; break;
    // From f32 (exact through double) this rounds once; from f64 it rounds through f32 first.
    case DType::BF16: t.data<bf16_t>()[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::I32:
      TT_CHECK(v >= INT32_MIN && v <= INT32_MAX, "cast of ", v, " to i32 is out of range");
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    default: TT_CHECK(false, "cast to ", dtype_name(t.dtype()), " is not supported");
  }
}

}  // namespace

Tensor cast(const Tensor& src, DType dtype) {
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  cast_into(out, src);
  return out;
}

void cast_into(const Tensor& dst, const Tensor& src) {
  TT_CHECK(dst.shape() == src.shape() && dst.device() == src.device() && dst.is_contiguous(),
           "cast_into: ", src, " into ", dst, " needs one shape, one device and a contiguous dst");
  if (dst.dtype() == src.dtype()) return dst.copy_from(src);
  Tensor in = src.contiguous();
  if (in.device().is_cuda()) return cuda_backend::cast(dst, in);
  for (int64_t i = 0; i < in.numel(); ++i) store(dst, i, load(in, i));
}

}  // namespace titan
