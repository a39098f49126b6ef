// Philox4x32-10 and the normal variate drawn from one block, as inline functions that compile
// for the host and for a CUDA device alike, so that a parameter drawn by a kernel has the bits
// the CPU draws (docs/design.md#initialisation).
//
// Bits alone are not enough: glibc's log and cos and CUDA's libdevice ones are not guaranteed to
// agree to the last bit, and nvcc contracts a·b + c into one FMA (one rounding) where g++ on
// x86-64 keeps two. So the transform from bits to a normal uses only operations IEEE 754 rounds
// correctly on both sides (+, −, ×, ÷, sqrt on doubles, and exact integer and bit work), each
// spelled as one rounding: __dadd_rn / __dmul_rn / … on the device, plain operators on the host,
// where core/ is compiled with -ffp-contract=off (CMakeLists.txt) so no compiler fuses them.
// The logarithm and the cosine are this file's own series; they are the same function on both
// sides by construction, and accurate to a few ulps, far below what an f32 weight keeps.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TT_HOST_DEVICE inline
#endif

namespace titan::philox {

// Doubles held in registers with excess precision (x87) would round twice and break the bits.
static_assert(FLT_EVAL_METHOD == 0, "the normal transform needs doubles evaluated as doubles");

struct Block {
  uint32_t w[4];
};

// One Philox4x32-10 block (Salmon et al., SC'11): 10 rounds of a multiply-xor network over a
// 128-bit counter under a 64-bit key.
TT_HOST_DEVICE Block block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                           uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
  constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// One correctly rounded operation each, never fused with its neighbours.
TT_HOST_DEVICE double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
TT_HOST_DEVICE double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
TT_HOST_DEVICE double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TT_HOST_DEVICE double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
TT_HOST_DEVICE double sqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);  // sqrtsd: correctly rounded, and no errno call for a ≥ 0
#endif
}
TT_HOST_DEVICE uint64_t bits_of(double v) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
#endif
}
TT_HOST_DEVICE double double_of(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

// Horner's rule over coefficients c[0] + c[1]·z + … + c[n-1]·z^(n-1), one rounding a step.
template <int N>
TT_HOST_DEVICE double horner(const double (&c)[N], double z) {
  double p = c[N - 1];
  for (int k = N - 2; k >= 0; --k) p = add(mul(p, z), c[k]);
  return p;
}

// ln(m · 2^-53) for an integer 1 ≤ m < 2^53. m = f·2^e with f in [√½, √2), and
// ln f = 2·atanh(s) = 2s·(1 + s²/3 + s⁴/5 + …) with s = (f − 1)/(f + 1), |s| ≤ 0.1716: twelve
// terms leave under 1e-19 relative.
TT_HOST_DEVICE double log_of_53bit(uint64_t m) {
  constexpr double kInverseOdd[12] = {
      0x1.0000000000000p+0, 0x1.5555555555555p-2, 0x1.999999999999ap-3, 0x1.2492492492492p-3,
      0x1.c71c71c71c71cp-4, 0x1.745d1745d1746p-4, 0x1.3b13b13b13b14p-4, 0x1.1111111111111p-4,
      0x1.e1e1e1e1e1e1ep-5, 0x1.af286bca1af28p-5, 0x1.8618618618618p-5, 0x1.642c8590b2164p-5};
  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi with its low 8 bits clear so that e·kLn2Hi is exact.
  constexpr double kLn2Hi = 0x1.62e42fefa3900p-1, kLn2Lo = 0x1.de6af278ece60p-46;
  constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
  // m < 2^53 converts exactly; its exponent field gives e, and a field of 1022 gives f in [½, 1).
  const uint64_t bits = bits_of(static_cast<double>(m));
  int64_t e = static_cast<int64_t>(bits >> 52) - 1022;
  double f = double_of((bits & 0x000FFFFFFFFFFFFFull) | (uint64_t{1022} << 52));
  if (f < kSqrtHalf) {
    f = mul(f, 2.0);
    e -= 1;
  }
  const double s = div(sub(f, 1.0), add(f, 1.0));
  const double ln_f = mul(mul(2.0, s), horner(kInverseOdd, mul(s, s)));
  const double k = static_cast<double>(e - 53);
  return add(mul(k, kLn2Hi), add(mul(k, kLn2Lo), ln_f));
}

// cos(2π·t) for the angle t = a·2^-64 + 2^-65 given by a 64-bit word a (never a multiple of
// π/4). The top two bits pick the quadrant; the rest, folded about π/4 with integers, leave
// θ in (0, π/4] where ten terms of the Taylor series of cos or sin are exact to 1e-20.
TT_HOST_DEVICE double cos_of_turn(uint64_t a) {
  constexpr double kCos[10] = {
      0x1.0000000000000p+0,  -0x1.0000000000000p-1,  0x1.5555555555555p-5,  -0x1.6c16c16c16c17p-10,
      0x1.a01a01a01a01ap-16, -0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29, -0x1.93974a8c07c9dp-37,
      0x1.ae7f3e733b81fp-45, -0x1.6827863b97d97p-53};
  constexpr double kSin[10] = {
      0x1.0000000000000p+0,  -0x1.5555555555555p-3,  0x1.1111111111111p-7,  -0x1.a01a01a01a01ap-13,
      0x1.71de3a556c734p-19, -0x1.ae64567f544e4p-26, 0x1.6124613a86d09p-33, -0x1.ae7f3e733b81fp-41,
      0x1.952c77030ad4ap-49, -0x1.2f49b46814157p-57};
  constexpr double kHalfPi = 0x1.921fb54442d18p+0;
  const unsigned quadrant = static_cast<unsigned>(a >> 62);
  // The angle within the quadrant is φ = t'·2^-52·(π/2) for the odd t' = 2·(51 bits) + 1.
  uint64_t t = ((a >> 11) & ((uint64_t{1} << 51) - 1)) * 2 + 1;
  // Past π/4, fold: φ = π/2 − θ, so cos φ = sin θ and sin φ = cos θ.
  const bool folded = t > (uint64_t{1} << 51);
  if (folded) t = (uint64_t{1} << 52) - t;
  const double theta = mul(mul(static_cast<double>(t), 0x1.0p-52), kHalfPi);
  const double z = mul(theta, theta);
  // cos(qπ/2 + φ) is cos φ, −sin φ, −cos φ, sin φ for q = 0..3.
  const bool want_sin = ((quadrant & 1u) != 0) != folded;
  const double v = want_sin ? mul(theta, horner(kSin, z)) : horner(kCos, z);
  return quadrant == 1 || quadrant == 2 ? -v : v;
}

// N(0, 1) from one block by Box–Muller, r·cos(2πt): the radius from words 0 and 1 (53 bits,
// odd, so that ln never sees 0 and u is never 1), the angle from words 2 and 3.
TT_HOST_DEVICE double normal_of(const Block& b) {
  const uint64_t lo = (static_cast<uint64_t>(b.w[1]) << 32) | b.w[0];
  const uint64_t hi = (static_cast<uint64_t>(b.w[3]) << 32) | b.w[2];
  const uint64_t m = ((lo >> 12) << 1) | 1;  // u = m·2^-53 in (0, 1)
  const double radius = sqrt(mul(-2.0, log_of_53bit(m)));
  return mul(radius, cos_of_turn(hi));
}

// Draw `draw` of the normal at `index` of the stream keyed (k0, k1): counter (index, draw, 0).
TT_HOST_DEVICE double normal_at(uint32_t k0, uint32_t k1, uint64_t index, uint32_t draw) {
  return normal_of(
      block(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), draw, 0, k0, k1));
}

// The first of draws 0, 1, … at `index` inside [lo, hi]: torch.nn.init.trunc_normal_'s
// distribution by rejection. A loop that depends on the data, which suits a GPU here: the
// caller guarantees at least half the mass inside (CounterRng::truncated_normal's check), the
// model's widest cut (±3σ of the output layer) rejects 0.27% of draws, so a warp of 32 runs a
// second round one time in twelve, and the ±2 absolute cut of std 0.02 never does. All 64
// draws missing (under 2^-64) gives the last one clamped, the same on both sides.
TT_HOST_DEVICE double truncated_normal_at(uint32_t k0, uint32_t k1, uint64_t index, double lo,
                                          double hi) {
  double x = 0;
  for (uint32_t draw = 0; draw < 64; ++draw) {
    x = normal_at(k0, k1, index, draw);
    if (x >= lo && x <= hi) return x;
  }
  return x < lo ? lo : hi;
}

}  // namespace titan::philox
