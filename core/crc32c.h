// CRC32C (Castagnoli), the checksum of checkpoint files and of TensorBoard's TFRecords, from
// ISA-L. The standard one: reflected, starting from ~0 and inverted at the end, so
// crc32c("123456789") == 0xE3069283 (RFC 3720's check value), the value every other tool
// (Python's crc32c, TensorFlow) computes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace titan {

// The CRC32C of `size` bytes, continuing `crc`, the CRC32C of what came before (0 to start):
// crc32c(b, crc32c(a)) == crc32c(a + b), so a file can be checked a piece at a time.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view data, uint32_t crc = 0) {
  return crc32c(data.data(), data.size(), crc);
}

// crc32c(a + b) from crc32c(a), crc32c(b) and b's length, without a's or b's bytes: so the
// pieces of one file can be checked on several threads at once and their CRCs joined in order.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t bytes_b);

}  // namespace titan
