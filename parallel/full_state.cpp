#include "parallel/full_state.h"

#include <algorithm>

#include "core/check.h"

namespace titan::parallel {

namespace {

// `local` and the full tensor as [rows, cols] matrices (1-D parameters, the norms, take the same
// path as weights), and which rows of the slice `local` holds: [row_begin, + row_count).
struct Views {
  Tensor full2d, local2d;
  int64_t row_begin = 0, row_count = 0;
};

Views views_of(const model::Parameter& p, const Tensor& local, const Tensor& full,
               const DeviceMesh& mesh) {
  const Shape slice = p.local_shape();
  Views v;
  v.full2d = full.view({full.numel() / p.cols(), p.cols()});
  const int64_t width = slice.ndim() == 2 ? slice[1] : 1;
  v.local2d = local.view({local.numel() / width, width});
  v.row_begin = std::min(slice[0], mesh.coordinate(MeshDim::DpShard) * local.size(0));
  v.row_count = std::min(local.size(0), slice[0] - v.row_begin);
  return v;
}

}  // namespace

Tensor gather_full_tensor(const model::Parameter& p, const Tensor& device_local,
                          const DeviceMesh& mesh) {
  // Checkpoints are assembled on the host: one copy of this rank's rows, then row moves there.
  const Tensor local = device_local.to(Device::cpu());
  Tensor full = Tensor::zeros(p.shape, local.dtype());
  // A tp-replicated parameter is the same on every tp rank: only tp rank 0 contributes, so the
  // sum below adds each element exactly once (x + 0 is exact).
  if (!p.tp_replicated() || mesh.coordinate(MeshDim::Tp) == 0) {
    const Views v = views_of(p, local, full, mesh);
    model::for_each_local_run(p, v.row_begin, v.row_count, [&](const model::LocalRun& run) {
      // Row by row: a column block of several rows is not contiguous, one row of it is.
      for (int64_t r = 0; r < run.rows; ++r) {
        v.full2d.narrow(0, run.full_row + r, 1)
            .view({p.cols()})
            .narrow(0, run.col_begin, run.width)
            .copy_from(v.local2d.narrow(0, run.local_offset + r, 1).view({run.width}));
      }
    });
  }
  const DeviceMesh owners = mesh.slice({"dp_shard", "tp"});
  if (owners.size() > 1) owners.comm().all_reduce(full, ReduceOp::Sum);
  return full;
}

void load_local_tensor(const Tensor& device_local, const model::Parameter& p, const Tensor& full,
                       const DeviceMesh& mesh) {
  TT_CHECK(full.shape() == p.shape, p.name, ": full tensor ", full, " for shape ", p.shape);
  if (!device_local.device().is_cpu()) {
    Tensor host = Tensor::empty(device_local.shape(), device_local.dtype());
    load_local_tensor(host, p, full, mesh);
    return device_local.copy_from(host);
  }
  const Tensor& local = device_local;
  local.zero_();
  const Views v = views_of(p, local, full, mesh);
  model::for_each_local_run(p, v.row_begin, v.row_count, [&](const model::LocalRun& run) {
    v.local2d.rows(run.local_offset, run.local_offset + run.rows)
        .copy_from(v.full2d.rows(run.full_row, run.full_row + run.rows)
                       .narrow(1, run.col_begin, run.width));
  });
}

}  // namespace titan::parallel
