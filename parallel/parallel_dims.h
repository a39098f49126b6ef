// The degrees of the device mesh dp_replicate × dp_shard × tp, validated once against the world
// size (torchtitan's ParallelDims). tp is the innermost dim, so a tp group is consecutive ranks
// and stays inside a node.
#pragma once

#include <cstdint>
#include <string>

namespace titan::parallel {

struct ParallelDims {
  int64_t dp_replicate = 1;  // DDP / HSDP replicas
  int64_t dp_shard = 1;      // FSDP shards
  int64_t tp = 1;            // tensor (and sequence) parallel
  int64_t world_size = 1;

  // dp_shard = -1 takes the rest of the world. Throws an InputError spelling out every factor
  // when the degrees are not positive or their product is not the world size.
  static ParallelDims resolve(int64_t dp_replicate, int64_t dp_shard, int64_t tp,
                              int64_t world_size);

  int64_t dp() const { return dp_replicate * dp_shard; }  // data-parallel degree
  bool dp_replicate_enabled() const { return dp_replicate > 1; }
  bool fsdp_enabled() const { return dp_shard > 1; }
  bool tp_enabled() const { return tp > 1; }
  std::string describe() const;  // "dp_replicate 2 × dp_shard 2 × tp 2 = 8 ranks"
};

}  // namespace titan::parallel
