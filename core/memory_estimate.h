// Bytes a rank is expected to hold, by what they are for, estimated from shapes before anything
// is allocated. The parts are the categories the allocator measures (core/memory_tag.h), so an
// estimate and a memory snapshot of the same run line up part by part. Each layer estimates
// what it allocates (model/: activations; parallel/: parameters, gradients, optimizer state
// and FSDP's gathered blocks); a caller adds the parts and decides. In double: any shape a user
// types gives a number, never an overflow.
#pragma once

#include <array>

#include "core/memory_tag.h"

namespace titan {

struct MemoryEstimate {
  std::array<double, kMemoryCategories> bytes{};

  double& operator[](MemoryCategory category) { return bytes[static_cast<size_t>(category)]; }
  double operator[](MemoryCategory category) const {
    return bytes[static_cast<size_t>(category)];
  }
  double total() const {
    double sum = 0;
    for (double b : bytes) sum += b;
    return sum;
  }
  MemoryEstimate& operator+=(const MemoryEstimate& other) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] += other.bytes[i];
    return *this;
  }
};

}  // namespace titan
