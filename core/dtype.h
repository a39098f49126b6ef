// Element types a Tensor can hold.
//
// The CPU reference ops compute in F32 (training) or F64 (gradient checks); BF16 is the CUDA
// compute and all-gather type; E4M3/E5M2 hold FP8 bytes whose codecs and scales live in fp8/.
// Low-precision types are distinct structs, not aliases of uint16_t/uint8_t, so that
// Tensor::data<T>() can refuse to hand out a bf16 buffer as if it held integers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace titan {

enum class DType : uint8_t { F32, F64, BF16, E4M3, E5M2, I32, I64, U8 };

struct bf16_t {
  uint16_t bits;
};
struct e4m3_t {
  uint8_t bits;
};
struct e5m2_t {
  uint8_t bits;
};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);

// Parses "f32", "float32", "bf16", "bfloat16", …; throws InputError naming the accepted values.
DType parse_dtype(std::string_view name);

// The DType of a C++ element type; used by Tensor::data<T>() to check the request.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}
template <>
constexpr DType dtype_of<bf16_t>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<e4m3_t>() {
  return DType::E4M3;
}
template <>
constexpr DType dtype_of<e5m2_t>() {
  return DType::E5M2;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::I64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::U8;
}

}  // namespace titan
