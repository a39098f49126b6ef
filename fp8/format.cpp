// FP8 encode/decode on the bits of an f32.
//
// encode() rounds in fixed point: the f32 significand (implicit bit included, 24 bits) is shifted
// right so that its lowest kept bit is one FP8 ulp, which for FP8 subnormals is a wider shift
// than for normals. The kept bits plus the biased exponent then form the code by addition, so a
// rounding that carries out of the mantissa bumps the exponent (1.9375 → 2.0 in e4m3) and a
// subnormal that rounds up to 2^emin lands on the smallest normal code, with no special case.
//
// Saturation is decided before rounding, on the magnitude: with SATFINITE every |x| above max
// ends at max, whether round-to-nearest would have kept it at max (449 in e4m3) or carried it to
// the next slot (which is NaN in e4m3 and inf in e5m2). Infinities are just the largest such |x|.
//
// decode() reads a 256-entry table per format, built at compile time: decode_scaled sits on the
// CPU reference paths of the FP8 linears, so it should cost a load and a multiply.
#include "fp8/format.h"

#include <array>
#include <bit>
#include <limits>

#include "core/check.h"

namespace titan::fp8 {
namespace {

struct Layout {
  int mantissa_bits;
  int exponent_bias;
  uint8_t max_code;  // largest finite magnitude
};

constexpr Layout kE4M3{3, 7, 0x7E};
constexpr Layout kE5M2{2, 15, 0x7B};

constexpr uint32_t kF32SignBit = 0x80000000u;
constexpr uint32_t kF32InfBits = 0x7F800000u;
constexpr uint32_t kF32MinNormalBits = 0x00800000u;
constexpr int kF32MantissaBits = 23;
constexpr int kF32Bias = 127;

constexpr uint8_t kNaNCode = 0x7F;  // both formats, for NaNs of either sign (as CUDA)

constexpr Layout layout_of(Format format) { return format == Format::E4M3 ? kE4M3 : kE5M2; }

constexpr bool is_nan_code(uint8_t code, Format format) {
  uint8_t magnitude = code & 0x7Fu;
  if (format == Format::E4M3) return magnitude == 0x7Fu;
  return magnitude > 0x7Cu;  // exponent all ones, mantissa non-zero
}

constexpr float decode_uncached(uint8_t code, Format format) {
  const Layout layout = layout_of(format);
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t magnitude = code & 0x7Fu;
  const uint32_t exponent = magnitude >> layout.mantissa_bits;
  const uint32_t mantissa = magnitude & ((1u << layout.mantissa_bits) - 1u);

  if (is_nan_code(code, format)) {
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(std::numeric_limits<float>::quiet_NaN()));
  }
  if (format == Format::E5M2 && magnitude == 0x7Cu) return std::bit_cast<float>(sign | kF32InfBits);

  float value;
  if (exponent == 0) {
    // Subnormal (or zero): mantissa counts units of the smallest subnormal, 2^(1 - bias - M).
    const float smallest_subnormal = format == Format::E4M3 ? 0x1p-9f : 0x1p-16f;
    value = static_cast<float>(mantissa) * smallest_subnormal;  // exact: at most 3 bits
  } else {
    const uint32_t f32_exponent = exponent - static_cast<uint32_t>(layout.exponent_bias) + kF32Bias;
    value = std::bit_cast<float>((f32_exponent << kF32MantissaBits) |
                                 (mantissa << (kF32MantissaBits - layout.mantissa_bits)));
  }
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(value));
}

constexpr std::array<float, 256> make_decode_table(Format format) {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) table[code] = decode_uncached(static_cast<uint8_t>(code), format);
  return table;
}

constexpr std::array<float, 256> kDecodeE4M3 = make_decode_table(Format::E4M3);
constexpr std::array<float, 256> kDecodeE5M2 = make_decode_table(Format::E5M2);

const std::array<float, 256>& decode_table(Format format) {
  return format == Format::E4M3 ? kDecodeE4M3 : kDecodeE5M2;
}

uint8_t encode_with(float x, Layout layout, uint32_t max_bits) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits & kF32SignBit) >> 24);
  const uint32_t abs_bits = bits & ~kF32SignBit;

  if (abs_bits > kF32InfBits) return kNaNCode;
  // Positive floats order like their bits, so this compares magnitudes; inf is included.
  if (abs_bits > max_bits) return sign | layout.max_code;
  // Zero and f32 subnormals (< 2^-126) are far below half the smallest FP8 subnormal.
  if (abs_bits < kF32MinNormalBits) return sign;

  const int exponent = static_cast<int>(abs_bits >> kF32MantissaBits) - kF32Bias;
  const uint32_t significand = (abs_bits & 0x007FFFFFu) | kF32MinNormalBits;  // 1.m · 2^23

  const int min_normal_exponent = 1 - layout.exponent_bias;
  int shift = kF32MantissaBits - layout.mantissa_bits;
  if (exponent < min_normal_exponent) shift += min_normal_exponent - exponent;
  // Half an ulp at this shift exceeds any 24-bit significand: rounds to zero.
  if (shift > 24) return sign;

  const uint32_t half = 1u << (shift - 1);
  const uint32_t dropped = significand & ((half << 1) - 1u);
  uint32_t kept = significand >> shift;
  if (dropped > half || (dropped == half && (kept & 1u))) ++kept;

  // kept holds the implicit bit for normals, so the exponent field goes in one lower; for
  // subnormals the field is 0 and kept is the code itself (2^M if it rounded up to min normal).
  const int biased_exponent = exponent + layout.exponent_bias;
  const uint32_t exponent_part = biased_exponent > 1 ? static_cast<uint32_t>(biased_exponent - 1) : 0u;
  const uint32_t code = (exponent_part << layout.mantissa_bits) + kept;
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

std::string_view format_name(Format format) {
  switch (format) {
    case Format::E4M3: return "e4m3";
    case Format::E5M2: return "e5m2";
  }
  TT_CHECK(false, "unknown FP8 format ", static_cast<int>(format));
}

float max_finite(Format format) {
  switch (format) {
    case Format::E4M3: return 448.0f;
    case Format::E5M2: return 57344.0f;
  }
  TT_CHECK(false, "unknown FP8 format ", static_cast<int>(format));
}

uint8_t encode(float x, Format format) {
  return encode_with(x, layout_of(format), std::bit_cast<uint32_t>(max_finite(format)));
}

float decode(uint8_t code, Format format) { return decode_table(format)[code]; }

void encode_scaled(const float* in, uint8_t* out, int64_t n, float scale, Format format) {
  TT_CHECK(n >= 0, "encode_scaled: element count must be non-negative, got ", n);
  const Layout layout = layout_of(format);
  const uint32_t max_bits = std::bit_cast<uint32_t>(max_finite(format));
  for (int64_t i = 0; i < n; ++i) out[i] = encode_with(in[i] * scale, layout, max_bits);
}

void decode_scaled(const uint8_t* in, float* out, int64_t n, float scale, Format format) {
  TT_CHECK(n >= 0, "decode_scaled: element count must be non-negative, got ", n);
  const std::array<float, 256>& table = decode_table(format);
  for (int64_t i = 0; i < n; ++i) out[i] = table[in[i]] * scale;
}

}  // namespace titan::fp8
