// The keys and values text generation keeps so that each new token attends to the earlier ones
// without recomputing them: per layer, k and v [B, Hkv, S_max, Dh] (the layout
// model/ops/attention/attention_decode.h reads), and how many positions of each sequence are
// filled.
//
// Grouped-query attention stores the Hkv kv heads, not the H query heads; under tensor
// parallelism a rank stores its own kv heads only. The cache is sized once for a batch (every
// sequence gets S_max positions), so its bytes are known before it is allocated: the caller
// reports them, and refuses a batch that would not fit, before anything large exists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace titan::model {

struct KvCacheShape {
  int64_t layers = 0;    // L
  int64_t batch = 0;     // B
  int64_t kv_heads = 0;  // Hkv on this rank
  int64_t max_seq = 0;   // S_max
  int64_t head_dim = 0;  // Dh
  DType dtype = DType::F32;

  // 2 (k and v) · L · B · Hkv · S_max · Dh elements.
  int64_t bytes() const;
  // "6 layers × 2 × [4, 16, 356, 16] f32 = 8.34 MiB" (KiB below 1 MiB)
  std::string describe() const;
};

class KvCache {
 public:
  // Allocates k and v of every layer; every sequence starts empty.
  KvCache(const KvCacheShape& shape, Device device);

  const KvCacheShape& shape() const { return shape_; }
  const Tensor& k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

  // Positions of sequence b that hold keys and values.
  int64_t length(int64_t b) const { return lengths_[static_cast<size_t>(b)]; }
  // Marks `count` more positions of sequence b filled (after every layer wrote them).
  void advance(int64_t b, int64_t count);

 private:
  KvCacheShape shape_;
  std::vector<Tensor> k_, v_;     // [B, Hkv, S_max, Dh] per layer
  std::vector<int64_t> lengths_;  // [B]
};

}  // namespace titan::model
