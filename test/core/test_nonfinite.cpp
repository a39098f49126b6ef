// first_nonfinite(), the check every reader of stored tensors runs on the bytes it read: for
// each float format its largest finite values pass and NaN and both infinities are found, at
// the first index, wherever they fall (first element, block edges, last element, an unaligned
// buffer); integers are never refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/nonfinite.h"

using namespace titan;

namespace {

// `count` copies of `fill` with `bad` at each of `at`, one byte into the buffer (unaligned).
template <class Bits>
std::vector<unsigned char> buffer(uint64_t count, Bits fill, const std::vector<uint64_t>& at,
                                  Bits bad) {
  std::vector<unsigned char> bytes(1 + count * sizeof(Bits));
  for (uint64_t i = 0; i < count; ++i)
    std::memcpy(&bytes[1 + i * sizeof(Bits)], &fill, sizeof(Bits));
  for (uint64_t i : at) std::memcpy(&bytes[1 + i * sizeof(Bits)], &bad, sizeof(Bits));
  return bytes;
}

template <class Bits>
std::optional<NonFinite> find(DType dtype, uint64_t count, Bits fill,
                              const std::vector<uint64_t>& at, Bits bad) {
  const std::vector<unsigned char> bytes = buffer(count, fill, at, bad);
  return first_nonfinite(dtype, bytes.data() + 1, count);
}

// Every position a vectorized block search could get wrong, for one bad value.
template <class Bits>
void check_found(DType dtype, Bits finite, Bits bad, const char* what) {
  CAPTURE(dtype_name(dtype));
  CAPTURE(what);
  const uint64_t n = 10000;
  CHECK_FALSE(find<Bits>(dtype, n, finite, {}, bad).has_value());
  for (const uint64_t at : {uint64_t{0}, uint64_t{4095}, uint64_t{4096}, uint64_t{8191}, n - 1}) {
    CAPTURE(at);
    const std::optional<NonFinite> found = find<Bits>(dtype, n, finite, {at, n - 1}, bad);
    REQUIRE(found.has_value());
    CHECK(found->index == at);
    CHECK(std::string(found->what) == what);
  }
  CHECK_FALSE(first_nonfinite(dtype, nullptr, 0).has_value());
}

template <class Float, class Bits>
Bits bits_of(Float value) {
  Bits bits;
  std::memcpy(&bits, &value, sizeof(Bits));
  return bits;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("nonfinite: NaN and infinities are found at their first index in every float format") {
    using F = std::numeric_limits<float>;
    using D = std::numeric_limits<double>;
    for (const float finite : {0.5f, -0.0f, F::max(), F::lowest(), F::denorm_min()}) {
      const uint32_t fill = bits_of<float, uint32_t>(finite);
      check_found<uint32_t>(DType::F32, fill, bits_of<float, uint32_t>(F::quiet_NaN()), "NaN");
      check_found<uint32_t>(DType::F32, fill, 0xFF800001u, "NaN");  // signalling, negative
      check_found<uint32_t>(DType::F32, fill, bits_of<float, uint32_t>(F::infinity()), "+inf");
      check_found<uint32_t>(DType::F32, fill, bits_of<float, uint32_t>(-F::infinity()), "-inf");
    }
    for (const double finite : {0.5, D::max(), D::lowest()}) {
      const uint64_t fill = bits_of<double, uint64_t>(finite);
      check_found<uint64_t>(DType::F64, fill, bits_of<double, uint64_t>(D::quiet_NaN()), "NaN");
      check_found<uint64_t>(DType::F64, fill, bits_of<double, uint64_t>(-D::infinity()), "-inf");
    }
    // bf16: its largest finite values are 0x7F7F and 0xFF7F.
    for (const uint16_t fill : {float_to_bf16(0.5f).bits, uint16_t{0x7F7F}, uint16_t{0xFF7F}}) {
      check_found<uint16_t>(DType::BF16, fill, float_to_bf16(F::quiet_NaN()).bits, "NaN");
      check_found<uint16_t>(DType::BF16, fill, uint16_t{0x7F80}, "+inf");
      check_found<uint16_t>(DType::BF16, fill, uint16_t{0xFF80}, "-inf");
    }
    // e5m2: ±57344 (0x7B, 0xFB) finite, ±inf 0x7C/0xFC, NaN 0x7D–0x7F.
    for (const uint8_t fill : {uint8_t{0x7B}, uint8_t{0xFB}, uint8_t{0x01}}) {
      check_found<uint8_t>(DType::E5M2, fill, uint8_t{0x7C}, "+inf");
      check_found<uint8_t>(DType::E5M2, fill, uint8_t{0xFC}, "-inf");
      check_found<uint8_t>(DType::E5M2, fill, uint8_t{0x7D}, "NaN");
    }
    // e4m3fn: ±448 (0x7E, 0xFE) finite, no infinities, NaN 0x7F/0xFF.
    for (const uint8_t fill : {uint8_t{0x7E}, uint8_t{0xFE}, uint8_t{0x78}}) {
      check_found<uint8_t>(DType::E4M3, fill, uint8_t{0x7F}, "NaN");
      check_found<uint8_t>(DType::E4M3, fill, uint8_t{0xFF}, "NaN");
    }
  }

  TEST_CASE("nonfinite: integers hold no NaN whatever their bits") {
    const std::vector<unsigned char> ones(64, 0xFF);
    for (const DType dtype : {DType::I32, DType::I64, DType::U8}) {
      CHECK_FALSE(first_nonfinite(dtype, ones.data(), 64 / dtype_size(dtype)).has_value());
    }
  }
}
