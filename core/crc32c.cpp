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

}  // namespace titan
