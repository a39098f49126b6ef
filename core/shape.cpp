#include "core/shape.h"

#include <algorithm>

#include "core/check.h"

namespace titan {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t dim : dims) push_back(dim);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t dim : *this) {
    // A wrapped count would allocate a few bytes for a huge tensor and write past them.
    const bool overflow = __builtin_mul_overflow(n, dim, &n);
    TT_CHECK(!overflow, "shape ", str(), " has more elements than int64 holds");
  }
  return n;
}

void Shape::push_back(int64_t dim) {
  TT_CHECK(ndim_ < kMaxDims, "shape ", str(), " already has the maximum of ", kMaxDims, " dims");
  TT_CHECK(dim >= 0, "negative dimension ", dim, " appended to shape ", str());
  dims_[ndim_++] = dim;
}

std::string Shape::str() const {
  std::string text = "[";
  for (int d = 0; d < ndim_; ++d) text += (d ? ", " : "") + std::to_string(dims_[d]);
  return text + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  return a.ndim_ == b.ndim_ && std::equal(a.begin(), a.end(), b.begin());
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.str(); }

}  // namespace titan
