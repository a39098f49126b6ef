// The degrees of the device mesh pp × dp_replicate × dp_shard × cp × tp, validated once against
// the world size (torchtitan's ParallelDims; docs/architecture.md#decision-16). pp is the
// outermost dim, so pipeline stages cross nodes; tp is the innermost, so a tp group is
// consecutive ranks and stays inside a node. A degree of 1 changes nothing: the mesh of
// (1, r, s, 1, t) is the three-dim mesh (r, s, t) rank for rank.
#pragma once

#include <cstdint>
#include <string>

namespace titan::parallel {

// The degrees as configured; dp_shard -1 takes the rest of the world.
struct MeshDegrees {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;
  int64_t cp = 1;
  int64_t tp = 1;
};

struct ParallelDims {
  int64_t pp = 1;            // pipeline stages (parallelism.pipeline_parallel_degree)
  int64_t dp_replicate = 1;  // DDP / HSDP replicas
  int64_t dp_shard = 1;      // FSDP shards
  int64_t cp = 1;            // context parallel: the sequence split (context_parallel_degree)
  int64_t tp = 1;            // tensor (and sequence) parallel
  int64_t world_size = 1;

  // Throws an InputError spelling out every factor when a degree is not positive or their
  // product is not the world size.
  static ParallelDims resolve(const MeshDegrees& degrees, int64_t world_size);
  // The three-dim mesh (pp 1, cp 1).
  static ParallelDims resolve(int64_t dp_replicate, int64_t dp_shard, int64_t tp,
                              int64_t world_size);

  int64_t dp() const { return dp_replicate * dp_shard; }  // data-parallel degree: batch split
  // The ranks that share one stage's parameters and average its gradients: data parallel and
  // context parallel alike see different tokens of the same weights.
  int64_t dp_cp() const { return dp() * cp; }
  int64_t fsdp_shards() const { return dp_shard * cp; }  // FSDP shards over dp_shard × cp
  bool pp_enabled() const { return pp > 1; }
  bool dp_replicate_enabled() const { return dp_replicate > 1; }
  bool fsdp_enabled() const { return fsdp_shards() > 1; }
  bool cp_enabled() const { return cp > 1; }
  bool tp_enabled() const { return tp > 1; }
  // "dp_replicate 2 × dp_shard 2 × tp 2 = 8 ranks"; pp and cp are named only when above 1.
  std::string describe() const;
};

}  // namespace titan::parallel
