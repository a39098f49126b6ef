#include "model/inference/kv_cache.h"

#include <climits>
#include <cstdio>

namespace titan::model {

int64_t KvCacheShape::bytes() const {
  int64_t elements = 2;
  for (int64_t n : {layers, batch, kv_heads, max_seq, head_dim}) {
    TT_CHECK(n >= 0 && (n == 0 || elements <= INT64_MAX / n), "KV cache of ", layers, " layers × [",
             batch, ", ", kv_heads, ", ", max_seq, ", ", head_dim, "] overflows 64 bits");
    elements *= n;
  }
  const int64_t width = static_cast<int64_t>(dtype_size(dtype));
  TT_CHECK(elements <= INT64_MAX / width, "KV cache of ", elements, " elements overflows 64 bits");
  return elements * width;
}

std::string KvCacheShape::describe() const {
  char size[32];
  const double b = static_cast<double>(bytes());
  if (b < 1024.0 * 1024.0) {
    std::snprintf(size, sizeof(size), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(size, sizeof(size), "%.2f MiB", b / (1024.0 * 1024.0));
  }
  return detail::concat(layers, " layers × 2 × [", batch, ", ", kv_heads, ", ", max_seq, ", ",
                        head_dim, "] ", dtype_name(dtype), " = ", size);
}

KvCache::KvCache(const KvCacheShape& shape, Device device)
    : shape_(shape), lengths_(static_cast<size_t>(shape.batch), 0) {
  (void)shape_.bytes();  // refuses a shape whose size overflows
  const Shape layer{shape.batch, shape.kv_heads, shape.max_seq, shape.head_dim};
  for (int64_t l = 0; l < shape.layers; ++l) {
    k_.push_back(Tensor::empty(layer, shape.dtype, device));
    v_.push_back(Tensor::empty(layer, shape.dtype, device));
  }
}

void KvCache::advance(int64_t b, int64_t count) {
  TT_CHECK(b >= 0 && b < shape_.batch && count >= 0 &&
               lengths_[static_cast<size_t>(b)] + count <= shape_.max_seq,
           "KV cache: sequence ", b, " cannot grow by ", count, " past ", shape_.max_seq,
           " positions");
  lengths_[static_cast<size_t>(b)] += count;
}

}  // namespace titan::model
