// Which part of a parameter this rank holds: the one description that FSDP, initialisation and
// checkpoints share (docs/architecture.md#decision-13).
//
// Tensor parallelism gives the rank a slice of the parameter (model::ParamSlice: row blocks of
// every part, or a column block). FSDP then shards that slice along dim 0 over dp_shard × cp,
// FSDP2 style: shard s holds rows [s·R, (s+1)·R) of the slice, R = ⌈slice rows / shards⌉, and the
// rows past the slice's end are zero padding that belongs to no one. How a run of the slice's
// rows maps to the full parameter is model::for_each_local_run.
#pragma once

#include <cstdint>
#include <functional>

#include "model/parameter.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

// R: rows per FSDP shard of a slice of `rows` rows over `shards` ranks (the last may be short,
// or empty).
int64_t fsdp_shard_rows(int64_t rows, int64_t shards);

// Rows [begin, begin + count) of a slice of `rows` rows that shard `index` of `shards` holds;
// count is 0 for a shard that lies wholly in the padding.
struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};
RowRange fsdp_shard_range(int64_t rows, int64_t shards, int64_t index);

// The rows of p's tensor-parallel slice that `local` holds on this rank: an FSDP shard (of
// R = local.size(0) rows) at this rank's index on dp_shard × cp, or the whole slice.
RowRange owned_rows(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh);

// Whether this rank's copy of what it holds is the one copy a checkpoint stores: replicas
// across dp_replicate, and a tp-replicated parameter's copies across tp, hold the same values,
// so only coordinate 0 of those dims writes.
bool is_primary_copy(const model::Parameter& p, const DeviceMesh& mesh);

// Visits the full-parameter rectangles this rank holds in `local`, in order: local rows
// [run.local_offset, + run.rows) (counted from owned_rows().begin, i.e. rows of `local`) are
// full rows [run.full_row, + run.rows), columns [run.col_begin, + run.width). A 1-D parameter
// has one column.
void for_each_owned_run(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh,
                        const std::function<void(const model::LocalRun&)>& visit);

}  // namespace titan::parallel
