#include "core/nonfinite.h"

#include <algorithm>
#include <cstring>

namespace titan {

namespace {

template <class Bits>
Bits bits_at(const unsigned char* bytes, uint64_t index) {
  Bits bits;
  std::memcpy(&bits, bytes + index * sizeof(Bits), sizeof(Bits));  // any alignment
  return bits;
}

// A float format by its bits: a value is not finite when every bit of `exponent` is set (for
// e4m3fn, which has no infinities, the exponent and mantissa bits of its one NaN); then it is
// NaN when a bit of `mantissa` is set, else an infinity of the sign bit's sign.
template <class Bits, Bits kExponent, Bits kMantissa, Bits kSign>
std::optional<NonFinite> first_in(const void* data, uint64_t count) {
  // Blocks are tested with a branch-free OR the compiler vectorizes; only a block holding a hit
  // is searched element by element.
  constexpr uint64_t kBlock = 4096;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (uint64_t begin = 0; begin < count; begin += kBlock) {
    const uint64_t n = std::min(kBlock, count - begin);
    const unsigned char* block = bytes + begin * sizeof(Bits);
    unsigned hit = 0;
    for (uint64_t i = 0; i < n; ++i) {
      hit |= static_cast<unsigned>((bits_at<Bits>(block, i) & kExponent) == kExponent);
    }
    if (hit == 0) continue;
    for (uint64_t i = 0; i < n; ++i) {
      const Bits bits = bits_at<Bits>(block, i);
      if ((bits & kExponent) != kExponent) continue;
      const char* what = (bits & kMantissa) != 0 ? "NaN" : (bits & kSign) != 0 ? "-inf" : "+inf";
      return NonFinite{begin + i, what};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<NonFinite> first_nonfinite(DType dtype, const void* data, uint64_t count) {
  switch (dtype) {
    case DType::F64:
      return first_in<uint64_t, 0x7FF0000000000000ull, 0x000FFFFFFFFFFFFFull,
                      0x8000000000000000ull>(data, count);
    case DType::F32: return first_in<uint32_t, 0x7F800000u, 0x007FFFFFu, 0x80000000u>(data, count);
    case DType::BF16: return first_in<uint16_t, 0x7F80u, 0x007Fu, 0x8000u>(data, count);
    case DType::E5M2: return first_in<uint8_t, 0x7Cu, 0x03u, 0x80u>(data, count);
    case DType::E4M3: return first_in<uint8_t, 0x7Fu, 0x7Fu, 0x80u>(data, count);
    case DType::I32:
    case DType::I64:
    case DType::U8: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace titan
