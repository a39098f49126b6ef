#include "parallel/full_state.h"

#include <algorithm>

#include "core/check.h"

namespace titan::parallel {

namespace {

// The rows of the slice that `local` holds: [begin, begin + count).
struct LocalRows {
  int64_t begin = 0;
  int64_t count = 0;
};

LocalRows local_rows_of(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh) {
  const int64_t slice_rows = p.local_shape()[0];
  const int64_t begin = std::min(slice_rows, mesh.coordinate(MeshDim::DpShard) * local.size(0));
  return {begin, std::min(local.size(0), slice_rows - begin)};
}

// [rows, cols] views, so 1-D parameters (norms) take the same path as matrices.
Tensor as_matrix(const Tensor& t, int64_t cols) { return t.view({t.numel() / cols, cols}); }

}  // namespace

Tensor gather_full_tensor(const model::Parameter& p, const Tensor& local, const DeviceMesh& mesh) {
  Tensor full = Tensor::zeros(p.shape, local.dtype());
  // A tp-replicated parameter is the same on every tp rank: only tp rank 0 contributes, so the
  // sum below adds each element exactly once (x + 0 is exact).
  const bool tp_replicated = p.slice.dim < 0 || p.slice.count == 1;
  if (!tp_replicated || mesh.coordinate(MeshDim::Tp) == 0) {
    const LocalRows rows = local_rows_of(p, local, mesh);
    const Tensor full2d = as_matrix(full, p.cols());
    const Shape slice = p.local_shape();
    const Tensor local2d = as_matrix(local, slice.ndim() == 2 ? slice[1] : 1);
    model::for_each_local_run(p, rows.begin, rows.count, [&](const model::LocalRun& run) {
      // Row by row: a column block of several rows is not contiguous, one row of it is.
      for (int64_t r = 0; r < run.rows; ++r) {
        full2d.narrow(0, run.full_row + r, 1)
            .view({p.cols()})
            .narrow(0, run.col_begin, run.width)
            .copy_from(local2d.narrow(0, run.local_offset + r, 1).view({run.width}));
      }
    });
  }
  const DeviceMesh owners = mesh.slice({"dp_shard", "tp"});
  if (owners.size() > 1) owners.comm().all_reduce(full, ReduceOp::Sum);
  return full;
}

void load_local_tensor(const Tensor& local, const model::Parameter& p, const Tensor& full,
                       const DeviceMesh& mesh) {
  TT_CHECK(full.shape() == p.shape, p.name, ": full tensor ", full, " for shape ", p.shape);
  local.zero_();
  const LocalRows rows = local_rows_of(p, local, mesh);
  const Tensor full2d = as_matrix(full, p.cols());
  const Shape slice = p.local_shape();
  const Tensor local2d = as_matrix(local, slice.ndim() == 2 ? slice[1] : 1);
  model::for_each_local_run(p, rows.begin, rows.count, [&](const model::LocalRun& run) {
    local2d.rows(run.local_offset, run.local_offset + run.rows)
        .copy_from(full2d.rows(run.full_row, run.full_row + run.rows).narrow(1, run.col_begin, run.width));
  });
}

}  // namespace titan::parallel
