// bfloat16 <-> float conversion, round-to-nearest-even, as the hardware does it.
//
// bf16 is the top 16 bits of an IEEE float. Truncating would bias every rounding toward zero,
// which shows up as a drift in long training runs, so the rounding adds 0x7FFF plus the lowest
// kept bit (ties go to the even neighbour). NaN stays NaN (quiet, sign kept): the rounding
// addition could otherwise carry a NaN payload into the exponent and turn it into infinity.
// Overflow past bf16's max rounds to infinity, as IEEE round-to-nearest does.
#pragma once

#include <bit>
#include <cstdint>

#include "core/dtype.h"

namespace titan {

constexpr bf16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return bf16_t{static_cast<uint16_t>((bits >> 16) | 0x0040u)};  // quiet NaN
  }
  uint32_t lowest_kept_bit = (bits >> 16) & 1u;
  bits += 0x7FFFu + lowest_kept_bit;
  return bf16_t{static_cast<uint16_t>(bits >> 16)};
}

constexpr float bf16_to_float(bf16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16);
}

// The float a value becomes after a round trip through bf16: how CPU code emulates bf16 storage.
constexpr float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

}  // namespace titan
