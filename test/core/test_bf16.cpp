// bf16 <-> float conversion (core/bf16.h) and dtype casts of tensors (core/cast.h).
//
// The rounding is checked three ways: every bf16 value survives a round trip, hand-worked
// cases pin down ties, overflow, subnormals, signed zero and NaN, and a sweep of every bf16
// pattern with a spread of discarded low halves is held to a plain reference that picks the
// nearer neighbour in double (ties to the even one).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/cast.h"
#include "support/tensor_testing.h"

namespace titan {
namespace {

uint16_t to_bf16_bits(float value) { return float_to_bf16(value).bits; }

bool is_nan_pattern(uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0; }

// The value a bf16 pattern stands for, with the all-ones exponent read as 2^128 so that
// "round to the nearer of two neighbours" also decides overflow the way IEEE does.
double unbounded_value(uint16_t bits) {
  if ((bits & 0x7F80u) == 0x7F80u) return (bits & 0x8000u) ? -0x1.0p128 : 0x1.0p128;
  return static_cast<double>(bf16_to_float(bf16_t{bits}));
}

// Round-to-nearest-even of a finite float, by comparing distances to its two bf16 neighbours.
uint16_t reference_bf16_bits(uint32_t float_bits) {
  double x = static_cast<double>(std::bit_cast<float>(float_bits));
  uint16_t toward_zero = static_cast<uint16_t>(float_bits >> 16);
  if ((float_bits & 0xFFFFu) == 0) return toward_zero;
  uint16_t away = static_cast<uint16_t>(toward_zero + 1);
  double d_toward = std::fabs(x - unbounded_value(toward_zero));
  double d_away = std::fabs(unbounded_value(away) - x);
  if (d_toward < d_away) return toward_zero;
  if (d_away < d_toward) return away;
  return (toward_zero & 1u) ? away : toward_zero;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "bf16: every non-NaN pattern round-trips exactly and every NaN stays NaN with its sign") {
    int mismatches = 0;
    for (uint32_t b = 0; b <= 0xFFFFu; ++b) {
      uint16_t bits = static_cast<uint16_t>(b);
      float value = bf16_to_float(bf16_t{bits});
      uint16_t back = to_bf16_bits(value);
      if (is_nan_pattern(bits)) {
        bool ok = is_nan_pattern(back) && (back & 0x8000u) == (bits & 0x8000u);
        if (!ok && mismatches++ < 5) FAIL_CHECK("NaN pattern " << b << " came back as " << back);
      } else if (back != bits && mismatches++ < 5) {
        FAIL_CHECK("pattern " << b << " came back as " << back);
      }
    }
    CHECK(mismatches == 0);
  }

  TEST_CASE("bf16: hand-checked round-to-nearest-even cases") {
    SUBCASE("an exact tie below an even neighbour rounds down") {
      CHECK(to_bf16_bits(1.0f + 0x1.0p-8f) == 0x3F80);
      CHECK(to_bf16_bits(-(1.0f + 0x1.0p-8f)) == 0xBF80);
    }
    SUBCASE("an exact tie below an odd neighbour rounds up to the even one") {
      CHECK(to_bf16_bits(1.0f + 3 * 0x1.0p-8f) == 0x3F82);
      CHECK(bf16_to_float(bf16_t{0x3F82}) == 1.0f + 0x1.0p-6f);
      CHECK(to_bf16_bits(-(1.0f + 3 * 0x1.0p-8f)) == 0xBF82);
    }
    SUBCASE("just above a tie rounds up") {
      CHECK(to_bf16_bits(1.0f + 0x1.0p-8f + 0x1.0p-20f) == 0x3F81);
      CHECK(to_bf16_bits(-(1.0f + 0x1.0p-8f + 0x1.0p-20f)) == 0xBF81);
    }
    SUBCASE("just below a tie rounds down") {
      CHECK(to_bf16_bits(1.0f + 0x1.0p-8f - 0x1.0p-20f) == 0x3F80);
    }
    SUBCASE("the largest finite float overflows to infinity") {
      CHECK(to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);
      CHECK(to_bf16_bits(-std::numeric_limits<float>::max()) == 0xFF80);
      // bf16's own largest finite value stays finite.
      CHECK(to_bf16_bits(bf16_to_float(bf16_t{0x7F7F})) == 0x7F7F);
    }
    SUBCASE("subnormals") {
      // The smallest float subnormal, 2^-149, is far below half of bf16's smallest, 2^-133.
      CHECK(bf16_to_float(bf16_t{0x0001}) == 0x1.0p-133f);
      CHECK(to_bf16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
      CHECK(to_bf16_bits(-std::numeric_limits<float>::denorm_min()) == 0x8000);
      // 2^-130 is a bf16 subnormal (float bits 0x00080000) and converts exactly.
      CHECK(to_bf16_bits(0x1.0p-130f) == 0x0008);
      CHECK(bf16_to_float(bf16_t{0x0008}) == 0x1.0p-130f);
      // Half of bf16's smallest subnormal is a tie with zero, which is even.
      CHECK(to_bf16_bits(0x1.0p-134f) == 0x0000);
      CHECK(to_bf16_bits(0x1.8p-133f) == 0x0002);  // 1.5 ulp: tie between 1 and 2, even is 2
    }
    SUBCASE("signed zero") {
      CHECK(to_bf16_bits(0.0f) == 0x0000);
      CHECK(to_bf16_bits(-0.0f) == 0x8000);
      CHECK(std::signbit(bf16_to_float(bf16_t{0x8000})));
    }
    SUBCASE("infinities") {
      CHECK(to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
      CHECK(to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
    }
    SUBCASE("NaN inputs give NaN outputs") {
      CHECK(is_nan_pattern(to_bf16_bits(std::numeric_limits<float>::quiet_NaN())));
      CHECK(is_nan_pattern(to_bf16_bits(std::numeric_limits<float>::signaling_NaN())));
      // A payload only in the discarded low half: plain rounding would turn it into infinity.
      CHECK(is_nan_pattern(to_bf16_bits(std::bit_cast<float>(0x7F800001u))));
      CHECK(is_nan_pattern(to_bf16_bits(std::bit_cast<float>(0x7FFFFFFFu))));
      uint16_t negative = to_bf16_bits(std::bit_cast<float>(0xFF800001u));
      CHECK(is_nan_pattern(negative));
      CHECK((negative & 0x8000u) != 0);
      CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
    }
  }

  TEST_CASE("bf16: every pattern with assorted discarded halves matches a nearest-even reference") {
    const uint32_t low_halves[] = {0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
    int mismatches = 0;
    for (uint32_t high = 0; high <= 0xFFFFu; ++high) {
      if ((high & 0x7F80u) == 0x7F80u) continue;  // inf and NaN are covered above
      for (uint32_t low : low_halves) {
        uint32_t bits = (high << 16) | low;
        uint16_t got = to_bf16_bits(std::bit_cast<float>(bits));
        uint16_t want = reference_bf16_bits(bits);
        if (got != want && mismatches++ < 5) {
          FAIL_CHECK("float bits " << bits << ": got " << got << ", expected " << want);
        }
      }
    }
    CHECK(mismatches == 0);
  }

  TEST_CASE("bf16: conversion is usable at compile time") {
    static_assert(float_to_bf16(1.0f).bits == 0x3F80);
    static_assert(bf16_to_float(bf16_t{0xC000}) == -2.0f);
    static_assert(round_to_bf16(1.0f + 0x1.0p-9f) == 1.0f);
    CHECK(round_to_bf16(3.0f) == 3.0f);
  }

  TEST_CASE("cast: f32 -> f64 -> f32 is exact") {
    Tensor x = testing::random_tensor({13, 7}, DType::F32, 1, 100.0);
    Tensor d = cast(x, DType::F64);
    CHECK(d.dtype() == DType::F64);
    CHECK(d.shape() == x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      CHECK(d.data<double>()[i] == static_cast<double>(x.data<float>()[i]));
    }
    Tensor back = cast(d, DType::F32);
    CHECK(testing::bitwise_equal(back, x));
  }

  TEST_CASE("cast: to bf16 equals float_to_bf16 element-wise and back to f32 is round_to_bf16") {
    Tensor x = testing::random_tensor({5, 11}, DType::F32, 2, 3.0);
    Tensor b = cast(x, DType::BF16);
    CHECK(b.dtype() == DType::BF16);
    CHECK(b.shape() == x.shape());
    Tensor f = cast(b, DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i) {
      float v = x.data<float>()[i];
      CHECK(b.data<bf16_t>()[i].bits == float_to_bf16(v).bits);
      CHECK(f.data<float>()[i] == round_to_bf16(v));
    }
  }

  TEST_CASE("cast: every float pair converts a whole buffer to the bits of one element at a time") {
    // Every bf16 pattern (NaNs, infinities, subnormals, both zeros), and f32 values whose low
    // halves round every way, ties and overflow among them.
    std::vector<uint16_t> half_bits(1 << 16);
    for (uint32_t b = 0; b < (1u << 16); ++b) half_bits[b] = static_cast<uint16_t>(b);
    std::vector<float> floats;
    for (uint32_t b = 0; b < (1u << 16); b += 7) {
      for (uint32_t low : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
        floats.push_back(std::bit_cast<float>((b << 16) | low));
      }
    }
    std::vector<bf16_t> halves;
    for (uint16_t b : half_bits) halves.push_back(bf16_t{b});
    const Tensor h = Tensor::empty({static_cast<int64_t>(halves.size())}, DType::BF16);
    std::copy(halves.begin(), halves.end(), h.data<bf16_t>());
    const Tensor f = Tensor::from_vector(floats, {static_cast<int64_t>(floats.size())});
    std::vector<double> doubles(floats.begin(), floats.end());
    const Tensor d = Tensor::from_vector(doubles, {static_cast<int64_t>(doubles.size())});

    const Tensor h_f = cast(h, DType::F32), h_d = cast(h, DType::F64);
    for (size_t i = 0; i < halves.size(); ++i) {
      const float expected = bf16_to_float(halves[i]);
      CHECK(std::bit_cast<uint32_t>(h_f.data<float>()[i]) == std::bit_cast<uint32_t>(expected));
      CHECK(std::bit_cast<uint64_t>(h_d.data<double>()[i]) ==
            std::bit_cast<uint64_t>(static_cast<double>(expected)));
    }
    const Tensor f_h = cast(f, DType::BF16), d_h = cast(d, DType::BF16);
    const Tensor f_d = cast(f, DType::F64), d_f = cast(d, DType::F32);
    for (size_t i = 0; i < floats.size(); ++i) {
      CHECK(f_h.data<bf16_t>()[i].bits == float_to_bf16(floats[i]).bits);
      CHECK(d_h.data<bf16_t>()[i].bits == float_to_bf16(floats[i]).bits);  // through f32
      CHECK(std::bit_cast<uint64_t>(f_d.data<double>()[i]) == std::bit_cast<uint64_t>(doubles[i]));
      CHECK(std::bit_cast<uint32_t>(d_f.data<float>()[i]) ==
            std::bit_cast<uint32_t>(static_cast<float>(doubles[i])));
    }
  }

  TEST_CASE("cast: i32 to f32 and f32 to i32") {
    Tensor i = Tensor::from_vector<int32_t>({-3, 0, 7, 1 << 24, -(1 << 20), 123456}, {2, 3});
    Tensor f = cast(i, DType::F32);
    CHECK(f.dtype() == DType::F32);
    CHECK(f.shape() == Shape{2, 3});
    const std::vector<float> expected = {-3.0f, 0.0f, 7.0f, 16777216.0f, -1048576.0f, 123456.0f};
    for (int64_t k = 0; k < 6; ++k) CHECK(f.data<float>()[k] == expected[k]);
    CHECK(testing::bitwise_equal(cast(f, DType::I32), i));
  }

  TEST_CASE("cast: a strided view is read in logical order and the result is a new tensor") {
    Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
    Tensor block = x.narrow(1, 1, 2);  // [[1, 2], [5, 6], [9, 10]]
    Tensor d = cast(block, DType::F64);
    CHECK(d.is_contiguous());
    const std::vector<double> expected = {1, 2, 5, 6, 9, 10};
    for (int64_t k = 0; k < 6; ++k) CHECK(d.data<double>()[k] == expected[k]);
    // Same dtype still copies.
    Tensor same = cast(x, DType::F32);
    same.data<float>()[0] = 42.0f;
    CHECK(x.data<float>()[0] == 0.0f);
  }

  TEST_CASE("cast: unsupported dtypes throw titan::Error") {
    Tensor x = Tensor::zeros({2}, DType::F32);
    CHECK_THROWS_AS(cast(x, DType::U8), Error);
    CHECK_THROWS_AS(cast(Tensor::zeros({2}, DType::I64), DType::F32), Error);
  }

}  // TEST_SUITE("fast")

}  // namespace titan
