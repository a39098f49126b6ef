// FP8 encode/decode (fp8/format.h).
//
// Checked four ways: every one of the 256 codes per format survives decode → encode (with NaN
// and e5m2's infinities pinned to what SATFINITE makes of them), hand-worked rows pin down ties,
// subnormals, carries, saturation, signed zero and NaN, a sweep of inputs between, at and
// beside every pair of neighbouring FP8 values is held to a plain reference that picks the
// nearest entry of the decoded table (ties to the even code), and the bulk forms are held to
// the scalar ones.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fp8/format.h"

namespace titan::fp8 {
namespace {

constexpr Format kFormats[] = {Format::E4M3, Format::E5M2};

float f32_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

bool is_nan_code(uint8_t code, Format format) {
  uint8_t magnitude = code & 0x7Fu;
  return format == Format::E4M3 ? magnitude == 0x7Fu : magnitude > 0x7Cu;
}

bool is_inf_code(uint8_t code, Format format) {
  return format == Format::E5M2 && (code & 0x7Fu) == 0x7Cu;
}

// Largest finite positive code, read off the decoded table rather than taken from the codec.
uint8_t largest_finite_code(Format format) {
  uint8_t largest = 0;
  for (int code = 0; code < 0x80; ++code) {
    float value = decode(static_cast<uint8_t>(code), format);
    if (std::isfinite(value) && value > decode(largest, format)) largest = static_cast<uint8_t>(code);
  }
  return largest;
}

// The reference: the finite FP8 value nearest to x, found by scanning the decoded table of the
// positive codes in double; on a tie the even code (even mantissa) wins. The sign of x goes on
// top, so ±0 follow x. Within range, the distance to each of x's two neighbours is exact in
// double, or (near 0) far from a tie; beyond max the nearest finite value is max, which is what
// SATFINITE gives too, and it is taken directly, since there the distances, rounded to double,
// would all look alike.
uint8_t nearest_code(float x, Format format) {
  const uint8_t sign = std::signbit(x) ? 0x80u : 0u;
  const uint8_t largest = largest_finite_code(format);
  double magnitude = std::fabs(static_cast<double>(x));
  if (magnitude >= decode(largest, format)) return largest | sign;
  uint8_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 0x80; ++code) {
    float value = decode(static_cast<uint8_t>(code), format);
    if (!std::isfinite(value)) continue;
    double distance = std::fabs(static_cast<double>(value) - magnitude);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = static_cast<uint8_t>(code);
      best_distance = distance;
    }
  }
  return best | sign;
}

struct Row {
  float input;
  uint8_t code;
  const char* why;
};

void check_rows(Format format, const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    INFO(format_name(format), ": ", row.why, " (input ", row.input, ")");
    CHECK(static_cast<int>(encode(row.input, format)) == static_cast<int>(row.code));
  }
}

}  // namespace

TEST_SUITE("fast") {

TEST_CASE("fp8 format names and largest finite values") {
  CHECK(format_name(Format::E4M3) == "e4m3");
  CHECK(format_name(Format::E5M2) == "e5m2");
  CHECK(max_finite(Format::E4M3) == 448.0f);
  CHECK(max_finite(Format::E5M2) == 57344.0f);
  for (Format format : kFormats) {
    CHECK(decode(largest_finite_code(format), format) == max_finite(format));
  }
}

TEST_CASE("fp8 decode of hand-worked codes") {
  // e4m3: S.EEEE.MMM, bias 7
  CHECK(decode(0x38, Format::E4M3) == 1.0f);             // 0.0111.000 = 2^0
  CHECK(decode(0x7E, Format::E4M3) == 448.0f);           // 0.1111.110 = 1.75 · 2^8
  CHECK(decode(0x01, Format::E4M3) == 0x1p-9f);          // 0.0000.001 = smallest subnormal
  CHECK(decode(0x07, Format::E4M3) == 7 * 0x1p-9f);      // largest subnormal
  CHECK(decode(0x08, Format::E4M3) == 0x1p-6f);          // 0.0001.000 = smallest normal
  CHECK(decode(0xB8, Format::E4M3) == -1.0f);            // sign bit
  CHECK(decode(0x00, Format::E4M3) == 0.0f);
  CHECK_FALSE(std::signbit(decode(0x00, Format::E4M3)));
  CHECK(std::signbit(decode(0x80, Format::E4M3)));       // -0
  CHECK(decode(0x80, Format::E4M3) == 0.0f);
  CHECK(std::isnan(decode(0x7F, Format::E4M3)));         // 0.1111.111 is NaN, not 480
  CHECK(std::isnan(decode(0xFF, Format::E4M3)));
  CHECK(decode(0x78, Format::E4M3) == 256.0f);           // 0.1111.000: e4m3fn uses the top exponent

  // e5m2: S.EEEEE.MM, bias 15
  CHECK(decode(0x3C, Format::E5M2) == 1.0f);             // 0.01111.00
  CHECK(decode(0x7B, Format::E5M2) == 57344.0f);         // 0.11110.11 = 1.75 · 2^15
  CHECK(decode(0x01, Format::E5M2) == 0x1p-16f);         // smallest subnormal
  CHECK(decode(0x03, Format::E5M2) == 3 * 0x1p-16f);     // largest subnormal
  CHECK(decode(0x04, Format::E5M2) == 0x1p-14f);         // smallest normal
  CHECK(decode(0x7C, Format::E5M2) == std::numeric_limits<float>::infinity());
  CHECK(decode(0xFC, Format::E5M2) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(decode(0x7D, Format::E5M2)));
  CHECK(std::isnan(decode(0x7E, Format::E5M2)));
  CHECK(std::isnan(decode(0x7F, Format::E5M2)));
  CHECK(std::isnan(decode(0xFD, Format::E5M2)));
}

TEST_CASE("fp8 every code survives decode then encode") {
  for (Format format : kFormats) {
    int nan_codes = 0;
    int inf_codes = 0;
    for (int i = 0; i < 256; ++i) {
      const uint8_t code = static_cast<uint8_t>(i);
      const uint8_t sign = code & 0x80u;
      const float value = decode(code, format);
      INFO(format_name(format), " code ", i, " decodes to ", value);
      if (is_nan_code(code, format)) {
        ++nan_codes;
        CHECK(std::isnan(value));
        // Every NaN re-encodes to the one NaN code, 0x7F, whatever its sign (as CUDA does).
        CHECK(static_cast<int>(encode(value, format)) == 0x7F);
      } else if (is_inf_code(code, format)) {
        ++inf_codes;
        CHECK(std::isinf(value));
        CHECK(std::signbit(value) == (sign != 0));
        // SATFINITE: an infinity encodes to the largest finite value of its sign, 0x7B / 0xFB.
        CHECK(static_cast<int>(encode(value, format)) == (sign | 0x7B));
      } else {
        CHECK(std::isfinite(value));
        CHECK(std::signbit(value) == (sign != 0));
        CHECK(static_cast<int>(encode(value, format)) == i);
      }
    }
    CHECK(nan_codes == (format == Format::E4M3 ? 2 : 6));
    CHECK(inf_codes == (format == Format::E4M3 ? 0 : 2));
  }
}

TEST_CASE("fp8 positive codes decode in increasing order") {
  // The codes are sign-magnitude, so among finite positive codes a larger code is a larger value.
  for (Format format : kFormats) {
    const int largest = largest_finite_code(format);
    for (int code = 1; code <= largest; ++code) {
      INFO(format_name(format), " code ", code);
      CHECK(decode(static_cast<uint8_t>(code - 1), format) < decode(static_cast<uint8_t>(code), format));
      CHECK(decode(static_cast<uint8_t>(code | 0x80), format) == -decode(static_cast<uint8_t>(code), format));
    }
  }
}

TEST_CASE("fp8 e4m3 encode of hand-worked values") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  check_rows(Format::E4M3, {
      {0.0f, 0x00, "zero"},
      {-0.0f, 0x80, "negative zero keeps its sign"},
      {1.0f, 0x38, "one: exponent 7 (the bias), mantissa 0"},
      {-1.0f, 0xB8, "minus one"},
      {448.0f, 0x7E, "max finite"},
      {-448.0f, 0xFE, "minus max finite"},
      {0x1p-6f, 0x08, "smallest normal 2^-6"},
      {0x1p-9f, 0x01, "smallest subnormal 2^-9"},
      {-0x1p-9f, 0x81, "minus smallest subnormal"},
      {0x1p-10f, 0x00, "half the smallest subnormal: tie between 0 and 2^-9, 0 is even"},
      {-0x1p-10f, 0x80, "minus half the smallest subnormal: tie to -0"},
      {std::nextafter(0x1p-10f, 1.0f), 0x01, "just above half the smallest subnormal rounds up"},
      {0.75f * 0x1p-9f, 0x01, "0.75 of the smallest subnormal rounds up"},
      {0.25f * 0x1p-9f, 0x00, "0.25 of the smallest subnormal rounds down"},
      {1.5f * 0x1p-9f, 0x02, "tie between subnormals 1 and 2 (units of 2^-9): to 2, even"},
      {2.5f * 0x1p-9f, 0x02, "tie between subnormals 2 and 3: to 2, even"},
      {7.5f * 0x1p-9f, 0x08, "tie between largest subnormal 0x07 and smallest normal 0x08: to 0x08"},
      {6.5f * 0x1p-9f, 0x06, "tie between subnormals 6 and 7: to 6"},
      {8.5f * 0x1p-9f, 0x08, "tie between smallest normal 0x08 and 0x09: to 0x08"},
      {1.0625f, 0x38, "tie between 1.0 (0x38) and 1.125 (0x39): to 1.0, even"},
      {std::nextafter(1.0625f, 2.0f), 0x39, "just above that tie: to 1.125"},
      {std::nextafter(1.0625f, 0.0f), 0x38, "just below that tie: to 1.0"},
      {1.1875f, 0x3A, "tie between 1.125 (0x39) and 1.25 (0x3A): to 1.25, even"},
      {-1.1875f, 0xBA, "the same tie, negative"},
      {1.9375f, 0x40, "tie between 1.875 (0x3F) and 2.0: carries into the next exponent"},
      {1.9f, 0x3F, "below that tie: stays at 1.875"},
      {432.0f, 0x7E, "tie between 416 (0x7D) and 448 (0x7E): to 448, even"},
      {449.0f, 0x7E, "beyond max: saturates"},
      {464.0f, 0x7E, "halfway to the NaN slot 480: saturates"},
      {465.0f, 0x7E, "past the halfway point to 480: saturates, not NaN"},
      {500.0f, 0x7E, "beyond max: saturates"},
      {-500.0f, 0xFE, "beyond minus max: saturates to minus max"},
      {1e9f, 0x7E, "far beyond max: saturates"},
      {std::numeric_limits<float>::max(), 0x7E, "largest float: saturates"},
      {inf, 0x7E, "+inf saturates (SATFINITE; e4m3fn has no inf)"},
      {-inf, 0xFE, "-inf saturates to minus max"},
      {nan, 0x7F, "NaN stays NaN"},
      {-nan, 0x7F, "negative NaN: 0x7F, as CUDA"},
      {f32_from_bits(0x7F800001u), 0x7F, "signalling NaN"},
      {f32_from_bits(0xFFFFFFFFu), 0x7F, "negative NaN with a full payload"},
      {f32_from_bits(0x00000001u), 0x00, "smallest f32 subnormal underflows to 0"},
      {f32_from_bits(0x807FFFFFu), 0x80, "largest negative f32 subnormal underflows to -0"},
      {1e-20f, 0x00, "tiny normal f32 underflows to 0"},
  });
}

TEST_CASE("fp8 e5m2 encode of hand-worked values") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  check_rows(Format::E5M2, {
      {0.0f, 0x00, "zero"},
      {-0.0f, 0x80, "negative zero keeps its sign"},
      {1.0f, 0x3C, "one: exponent 15 (the bias), mantissa 0"},
      {-1.0f, 0xBC, "minus one"},
      {57344.0f, 0x7B, "max finite"},
      {-57344.0f, 0xFB, "minus max finite"},
      {0x1p-14f, 0x04, "smallest normal 2^-14"},
      {0x1p-16f, 0x01, "smallest subnormal 2^-16"},
      {0x1p-17f, 0x00, "half the smallest subnormal: tie between 0 and 2^-16, 0 is even"},
      {-0x1p-17f, 0x80, "minus half the smallest subnormal: tie to -0"},
      {std::nextafter(0x1p-17f, 1.0f), 0x01, "just above half the smallest subnormal rounds up"},
      {0.75f * 0x1p-16f, 0x01, "0.75 of the smallest subnormal rounds up"},
      {1.5f * 0x1p-16f, 0x02, "tie between subnormals 1 and 2 (units of 2^-16): to 2, even"},
      {3.5f * 0x1p-16f, 0x04, "tie between largest subnormal 0x03 and smallest normal 0x04: to 0x04"},
      {2.5f * 0x1p-16f, 0x02, "tie between subnormals 2 and 3: to 2"},
      {1.125f, 0x3C, "tie between 1.0 (0x3C) and 1.25 (0x3D): to 1.0, even"},
      {std::nextafter(1.125f, 2.0f), 0x3D, "just above that tie: to 1.25"},
      {1.375f, 0x3E, "tie between 1.25 (0x3D) and 1.5 (0x3E): to 1.5, even"},
      {-1.375f, 0xBE, "the same tie, negative"},
      {1.875f, 0x40, "tie between 1.75 (0x3F) and 2.0: carries into the next exponent"},
      {53248.0f, 0x7A, "tie between 49152 (0x7A) and 57344 (0x7B): to 49152, even"},
      {57345.0f, 0x7B, "beyond max: saturates"},
      {61439.0f, 0x7B, "just below halfway to 65536: saturates"},
      {61440.0f, 0x7B, "tie between 57344 and 65536 (inf's slot): saturates, not inf"},
      {65536.0f, 0x7B, "what would be inf: saturates"},
      {-70000.0f, 0xFB, "beyond minus max: saturates to minus max"},
      {1e30f, 0x7B, "far beyond max: saturates"},
      {inf, 0x7B, "+inf saturates (SATFINITE)"},
      {-inf, 0xFB, "-inf saturates to minus max"},
      {nan, 0x7F, "NaN stays NaN"},
      {-nan, 0x7F, "negative NaN: 0x7F, as CUDA"},
      {f32_from_bits(0x7F800001u), 0x7F, "signalling NaN"},
      {f32_from_bits(0x00000001u), 0x00, "smallest f32 subnormal underflows to 0"},
      {f32_from_bits(0x807FFFFFu), 0x80, "largest negative f32 subnormal underflows to -0"},
  });
}

TEST_CASE("fp8 encode picks the nearest value between every pair of neighbours") {
  for (Format format : kFormats) {
    const int largest = largest_finite_code(format);
    std::vector<float> inputs;
    // Between every pair of neighbouring positive values (and from max onward, one more max-ulp
    // step and beyond): sevenths of the gap, the exact midpoint and the floats either side of it.
    for (int code = 0; code <= largest; ++code) {
      const double low = decode(static_cast<uint8_t>(code), format);
      const double high = code < largest ? static_cast<double>(decode(static_cast<uint8_t>(code + 1), format))
                                         : 2 * low - decode(static_cast<uint8_t>(code - 1), format);
      for (int k = 0; k < 7; ++k) inputs.push_back(static_cast<float>(low + (high - low) * k / 7));
      const float midpoint = static_cast<float>((low + high) / 2);  // exact in f32
      REQUIRE(static_cast<double>(midpoint) == (low + high) / 2);
      inputs.push_back(midpoint);
      inputs.push_back(std::nextafter(midpoint, 0.0f));
      inputs.push_back(std::nextafter(midpoint, std::numeric_limits<float>::infinity()));
    }
    const double max = max_finite(format);
    for (double beyond : {max * 1.01, max * 2, max * 1e3, 1e38}) inputs.push_back(static_cast<float>(beyond));
    inputs.push_back(f32_from_bits(0x00000001u));
    inputs.push_back(f32_from_bits(0x007FFFFFu));
    inputs.push_back(f32_from_bits(0x00800000u));

    int mismatches = 0;
    for (float positive : inputs) {
      for (float x : {positive, -positive}) {
        const uint8_t expected = nearest_code(x, format);
        const uint8_t got = encode(x, format);
        if (got != expected && ++mismatches <= 10) {
          FAIL_CHECK(format_name(format), ": encode(", x, ") = ", static_cast<int>(got), " (",
                     decode(got, format), "), nearest is ", static_cast<int>(expected), " (",
                     decode(expected, format), ")");
        }
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("fp8 encode picks the nearest value across a stride through all floats") {
  // Every 4099th f32 bit pattern (a prime stride, so all exponents and many mantissa patterns
  // are hit), finite ones only: NaN and inf have their own rows above.
  for (Format format : kFormats) {
    int mismatches = 0;
    int checked = 0;
    for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 4099) {
      const float x = f32_from_bits(static_cast<uint32_t>(bits));
      if (!std::isfinite(x)) continue;
      ++checked;
      const uint8_t expected = nearest_code(x, format);
      const uint8_t got = encode(x, format);
      if (got != expected && ++mismatches <= 10) {
        FAIL_CHECK(format_name(format), ": encode(", x, ") = ", static_cast<int>(got),
                   ", nearest is ", static_cast<int>(expected));
      }
    }
    CHECK(checked > 1000000);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("fp8 bulk encode and decode match the scalar forms") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, 0.3f, -2.7f, 1.0625f, 100.0f, 449.0f,
                               6e4f, -1e9f, 0x1p-10f, 0x1p-17f, 1e-30f, inf, -inf, nan};
  for (int i = 0; i < 200; ++i) values.push_back(std::ldexp(1.0f + i / 200.0f, i % 40 - 20) * (i % 2 ? -1 : 1));

  for (Format format : kFormats) {
    for (float scale : {1.0f, 0.5f, 3.0f, 1.0f / 448.0f, 1e6f, 0.0f}) {
      INFO(format_name(format), " scale ", scale);
      std::vector<uint8_t> codes(values.size(), 0xAA);
      encode_scaled(values.data(), codes.data(), static_cast<int64_t>(values.size()), scale, format);
      int encode_mismatches = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        if (codes[i] != encode(values[i] * scale, format)) ++encode_mismatches;
      }
      CHECK(encode_mismatches == 0);

      std::vector<uint8_t> all_codes(256);
      for (int i = 0; i < 256; ++i) all_codes[i] = static_cast<uint8_t>(i);
      std::vector<float> decoded(256, 12345.0f);
      decode_scaled(all_codes.data(), decoded.data(), 256, scale, format);
      int decode_mismatches = 0;
      for (int i = 0; i < 256; ++i) {
        const float expected = decode(static_cast<uint8_t>(i), format) * scale;
        const bool same = std::isnan(expected) ? std::isnan(decoded[i])
                                               : std::bit_cast<uint32_t>(decoded[i]) == std::bit_cast<uint32_t>(expected);
        if (!same) ++decode_mismatches;
      }
      CHECK(decode_mismatches == 0);
    }
  }

  // n = 0 touches nothing.
  uint8_t untouched_code = 0xAA;
  float untouched_value = 7.0f;
  float one = 1.0f;
  uint8_t code_one = 0x38;
  encode_scaled(&one, &untouched_code, 0, 1.0f, Format::E4M3);
  decode_scaled(&code_one, &untouched_value, 0, 1.0f, Format::E4M3);
  CHECK(untouched_code == 0xAA);
  CHECK(untouched_value == 7.0f);
}

}  // TEST_SUITE("fast")

}  // namespace titan::fp8
