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

// dst[i] = convert(src[i]) over a whole buffer: a loop of one typed expression, which the
// compiler vectorizes, where load() and store() pay a switch and a double per element (about
// 10 ns an element: the bulk of a model's load before). Every conversion gives the bits
// store(load()) gives.
template <class In, class Out, class Convert>
void convert_all(const Tensor& dst, const Tensor& src, Convert convert) {
  const In* in = src.data<In>();
  Out* out = dst.data<Out>();
  const int64_t n = src.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = convert(in[i]);
}

// The float conversions, whole buffer at a time; false for the pairs load() and store() keep
// (those with i32, whose range check needs a branch per element).
bool convert_floats(const Tensor& dst, const Tensor& src) {
  const DType from = src.dtype(), to = dst.dtype();
  const auto widen = [](auto v) { return v; };
  if (from == DType::BF16 && to == DType::F32) {
    convert_all<bf16_t, float>(dst, src, bf16_to_float);
  } else if (from == DType::BF16 && to == DType::F64) {
    convert_all<bf16_t, double>(dst, src, [](bf16_t v) { return double{bf16_to_float(v)}; });
  } else if (from == DType::F32 && to == DType::BF16) {
    convert_all<float, bf16_t>(dst, src, float_to_bf16);
  } else if (from == DType::F64 && to == DType::BF16) {
    // Through f32 first, as store() rounds it.
    convert_all<double, bf16_t>(dst, src,
                                [](double v) { return float_to_bf16(static_cast<float>(v)); });
  } else if (from == DType::F32 && to == DType::F64) {
    convert_all<float, double>(dst, src, widen);
  } else if (from == DType::F64 && to == DType::F32) {
    convert_all<double, float>(dst, src, [](double v) { return static_cast<float>(v); });
  } else {
    return false;
  }
  return true;
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
  if (convert_floats(dst, in)) return;
  const int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) store(dst, i, load(in, i));
}

}  // namespace titan
