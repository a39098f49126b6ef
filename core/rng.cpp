#include "core/rng.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"
#include "core/philox.h"

namespace titan {

namespace {

// splitmix64's finaliser: spreads the seed so that seeds 0, 1, 2 give unrelated keys.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  const philox::Block b = philox::block(c[0], c[1], c[2], c[3], k[0], k[1]);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return h;
}

CounterRng::CounterRng(uint64_t seed, std::string_view stream_name) {
  uint64_t key = mix64(mix64(seed) ^ hash_name(stream_name));
  key_ = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
}

PhiloxCounter CounterRng::block(uint64_t index, uint32_t draw) const {
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), draw, 0},
                       key_);
}

uint64_t CounterRng::bits64(uint64_t index, uint32_t draw) const {
  PhiloxCounter r = block(index, draw);
  return (static_cast<uint64_t>(r[1]) << 32) | r[0];
}

double CounterRng::uniform(uint64_t index, uint32_t draw) const {
  // 53 random bits, offset by half a step so that neither 0 nor 1 can come out. Above 2^52 the
  // half step is not representable and rounds to even, so all-ones bits (2^53 - 0.5) would
  // become exactly 1.0: the clamp maps that one case to the largest double below 1.
  double u = (static_cast<double>(bits64(index, draw) >> 11) + 0.5) * 0x1.0p-53;
  return std::min(u, 0x1.fffffffffffffp-1);
}

double CounterRng::normal(uint64_t index, uint32_t draw) const {
  return philox::normal_at(key_[0], key_[1], index, draw);
}

void check_truncation(double lo, double hi) {
  double mass = 0.5 * (std::erf(hi / std::numbers::sqrt2) - std::erf(lo / std::numbers::sqrt2));
  TT_CHECK(lo < hi && mass >= 0.5, "truncated normal on [", lo, ", ", hi,
           "] sigma holds too little probability mass (", mass, ") for rejection sampling");
}

double CounterRng::truncated_normal(uint64_t index, double lo, double hi) const {
  check_truncation(lo, hi);
  return philox::truncated_normal_at(key_[0], key_[1], index, lo, hi);
}

}  // namespace titan
