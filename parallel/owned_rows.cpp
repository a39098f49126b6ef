#include "parallel/owned_rows.h"

#include <algorithm>

#include "core/check.h"

namespace titan::parallel {

int64_t fsdp_shard_rows(int64_t rows, int64_t shards) {
  TT_CHECK(rows >= 0 && shards > 0, "fsdp_shard_rows(", rows, ", ", shards, ")");
  return (rows + shards - 1) / shards;
}

RowRange fsdp_shard_range(int64_t rows, int64_t shards, int64_t index) {
  const int64_t per_shard = fsdp_shard_rows(rows, shards);
  const int64_t begin = std::min(rows, index * per_shard);
  return {begin, std::min(rows, begin + per_shard) - begin};
}

RowRange owned_rows(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh) {
  const int64_t slice_rows = p.local_shape()[0];
  // An FSDP shard has R rows at this rank's index on dp_shard × cp; an unsharded slice is shard
  // 0 of 1 (its index may be non-zero when the parameter is kept whole on every dp rank).
  if (local.size(0) == slice_rows) return {0, slice_rows};
  const int64_t begin = std::min(slice_rows, mesh[kDpShardCp].rank() * local.size(0));
  return {begin, std::min(local.size(0), slice_rows - begin)};
}

bool is_primary_copy(const model::Parameter& p, const DeviceMesh& mesh) {
  if (mesh.coordinate(MeshDim::DpReplicate) != 0) return false;
  return !p.tp_replicated() || mesh.coordinate(MeshDim::Tp) == 0;
}

void for_each_owned_run(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh,
                        const std::function<void(const model::LocalRun&)>& visit) {
  const RowRange rows = owned_rows(p, local, mesh);
  model::for_each_local_run(p, rows.begin, rows.count, visit);
}

}  // namespace titan::parallel
