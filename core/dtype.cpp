#include "core/dtype.h"

#include "core/check.h"

namespace titan {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::E4M3: return 1;
    case DType::E5M2: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  TT_CHECK(false, "unknown dtype ", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::E4M3: return "e4m3";
    case DType::E5M2: return "e5m2";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  TT_CHECK(false, "unknown dtype ", static_cast<int>(dtype));
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16 ||
         dtype == DType::E4M3 || dtype == DType::E5M2;
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::F32;
  if (name == "f64" || name == "float64") return DType::F64;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "e4m3" || name == "float8_e4m3fn") return DType::E4M3;
  if (name == "e5m2" || name == "float8_e5m2") return DType::E5M2;
  if (name == "i32" || name == "int32") return DType::I32;
  if (name == "i64" || name == "int64") return DType::I64;
  if (name == "u8" || name == "uint8") return DType::U8;
  input_error("unknown dtype '", name, "'; use one of f32, f64, bf16, e4m3, e5m2, i32, i64, u8");
}

}  // namespace titan
