// The two FP8 formats of Hopper's tensor cores (OCP FP8, as CUDA's __nv_fp8_e4m3/_e5m2):
//
//   e4m3fn  1 sign, 4 exponent (bias 7), 3 mantissa bits; max ±448; no infinities; NaN is
//           S.1111.111 (0x7F, 0xFF); smallest subnormal 2⁻⁹
//   e5m2    1 sign, 5 exponent (bias 15), 2 mantissa bits; max ±57344; ±inf 0x7C/0xFC; NaN
//           0x7D–0x7F (and signed); smallest subnormal 2⁻¹⁶
//
// encode() is CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt) bit for bit:
// round-to-nearest-even, and anything beyond the largest finite value — infinities included —
// saturates to ±max. NaN stays NaN — a NaN in training data is a bug to surface, not a value
// to clamp into range — and, as CUDA's conversion does, every NaN encodes to 0x7F whatever its
// sign (so 0xFF decodes to NaN but re-encodes to 0x7F).
// decode() is exact: every FP8 value is an f32 value.
#pragma once

#include <cstdint>
#include <string_view>

namespace titan::fp8 {

enum class Format : uint8_t { E4M3, E5M2 };

std::string_view format_name(Format format);  // "e4m3", "e5m2"
float max_finite(Format format);               // 448, 57344

uint8_t encode(float x, Format format);
float decode(uint8_t code, Format format);

// Bulk forms over n elements: out[i] = encode(in[i] · scale), out[i] = decode(in[i]) · scale.
void encode_scaled(const float* in, uint8_t* out, int64_t n, float scale, Format format);
void decode_scaled(const uint8_t* in, float* out, int64_t n, float scale, Format format);

}  // namespace titan::fp8
