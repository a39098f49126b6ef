#include "core/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace titan {

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  // ISA-L's crc32_iscsi neither inverts the initial value nor the result; CRC32C does both, so
  // a continued CRC is un-inverted first. It takes an int length, hence the chunks; it does not
  // write through its non-const pointer.
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));
  unsigned int state = ~crc;
  while (size > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(size, INT_MAX));
    state = crc32_iscsi(bytes, chunk, state);
    bytes += chunk;
    size -= static_cast<size_t>(chunk);
  }
  return ~state;
}

namespace {

// Polynomials over GF(2) modulo CRC32C's, in the CRC's reflected bit order: bit 31 holds x^0.
constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;
constexpr uint32_t kOne = 1u << 31;  // x^0

// a·b mod P: b times x^k is accumulated for each term x^k of a, highest bit (x^0) first.
uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t term = kOne; term != 0 && a != 0; term >>= 1) {
    if ((a & term) != 0) {
      product ^= b;
      a ^= term;
    }
    b = (b & 1u) != 0 ? (b >> 1) ^ kReflectedPolynomial : b >> 1;  // b·x
  }
  return product;
}

// x^(8·bytes) mod P, by squaring: x^(2^k) for each bit k of 8·bytes.
uint32_t x_to_8n(uint64_t bytes) {
  uint32_t result = kOne;
  uint32_t power = kOne >> 8;  // x^8 = x^(8·2^0): bit 31 - 8
  for (; bytes != 0; bytes >>= 1) {
    if ((bytes & 1u) != 0) result = multiply(result, power);
    power = multiply(power, power);
  }
  return result;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t bytes_b) {
  // The CRC is linear over GF(2) once its initial and final inversions are accounted for, and
  // they cancel here: crc(a + b) = crc(a)·x^(8·|b|) + crc(b) mod P.
  return multiply(crc_a, x_to_8n(bytes_b)) ^ crc_b;
}

}  // namespace titan
