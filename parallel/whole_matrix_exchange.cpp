#include "parallel/whole_matrix_exchange.h"

#include "core/check.h"
#include "core/memory_tag.h"
#include "parallel/owned_rows.h"

namespace titan::parallel {

namespace {

// Visits the full-matrix rectangles that group member `member` holds of p, in the rows of its
// piece: the member's tp coordinate picks its slice, its dp_shard × cp coordinate its FSDP rows.
void for_each_member_run(const model::Parameter& p, int64_t member, int64_t shards, int64_t tp,
                         const std::function<void(const model::LocalRun&)>& visit) {
  model::Parameter slice;
  slice.name = p.name;
  slice.shape = p.shape;
  slice.parts = p.parts;
  slice.slice = p.slice;
  if (slice.slice.dim >= 0 && slice.slice.count > 1) slice.slice.index = member % tp;
  const int64_t slice_rows = slice.local_shape()[0];
  const RowRange rows =
      shards > 1 ? fsdp_shard_range(slice_rows, shards, member / tp) : RowRange{0, slice_rows};
  model::for_each_local_run(slice, rows.begin, rows.count, visit);
}

// Copies run `run` between a member's piece (its rows) and the whole matrix.
void copy_run(const Tensor& whole, const Tensor& piece, const model::LocalRun& run,
              bool into_whole) {
  const int64_t cols = whole.size(1);
  if (run.width == cols) {
    const Tensor w = whole.rows(run.full_row, run.full_row + run.rows);
    const Tensor q = piece.rows(run.local_offset, run.local_offset + run.rows);
    into_whole ? w.copy_from(q) : q.copy_from(w);
    return;
  }
  // A column slice: one contiguous row segment at a time.
  for (int64_t r = 0; r < run.rows; ++r) {
    const Tensor w = whole.rows(run.full_row + r, run.full_row + r + 1)
                         .view({cols})
                         .narrow(0, run.col_begin, run.width);
    const Tensor q = piece.rows(run.local_offset + r, run.local_offset + r + 1).view({run.width});
    into_whole ? w.copy_from(q) : q.copy_from(w);
  }
}

}  // namespace

WholeMatrixExchange::WholeMatrixExchange(const DeviceMesh& mesh)
    : group_(mesh.slice({MeshDim::DpShard, MeshDim::Cp, MeshDim::Tp})),
      shards_(mesh[kDpShardCp].size()),
      tp_(mesh.degree(MeshDim::Tp)) {}

void WholeMatrixExchange::transform(const std::vector<const model::Parameter*>& params,
                                    const std::vector<Tensor>& pieces,
                                    const model::WholeMatrixTransform& transform) {
  TT_CHECK(params.size() == pieces.size(), "WholeMatrixExchange: ", pieces.size(),
           " pieces for ", params.size(), " matrices");
  Communicator& comm = group_.comm();
  const int64_t n = comm.size();
  const int64_t me = comm.rank();
  MemoryTagScope tag(MemoryCategory::CommBuffers);
  for (size_t round = 0; round < params.size(); round += static_cast<size_t>(n)) {
    const size_t end = std::min(params.size(), round + static_cast<size_t>(n));
    // The matrix this rank owns in the round, if any: index round + me.
    const size_t mine = round + static_cast<size_t>(me);
    const bool owns = mine < end;
    std::vector<Tensor> received(static_cast<size_t>(n));  // by member; [me] unused
    std::vector<PeerTransfer> transfers;
    for (size_t i = round; i < end; ++i) {
      TT_CHECK(pieces[i].is_contiguous() && pieces[i].ndim() == 2, "WholeMatrixExchange: ",
               params[i]->name, "'s piece ", pieces[i], " is not a contiguous matrix");
      const int owner = static_cast<int>(i - round);
      if (owner != me) {
        transfers.push_back({PeerTransfer::Direction::Send, pieces[i], owner, 0});
        continue;
      }
      for (int64_t m = 0; m < n; ++m) {
        if (m == me) continue;
        received[m] = Tensor::empty(pieces[i].shape(), pieces[i].dtype(), pieces[i].device());
        transfers.push_back({PeerTransfer::Direction::Recv, received[m], static_cast<int>(m), 0});
      }
    }
    for (Work& w : comm.point_to_point_async(transfers)) w.wait();

    transfers.clear();
    if (owns) {
      const model::Parameter& p = *params[mine];
      const Tensor whole = Tensor::zeros(p.shape, pieces[mine].dtype(), pieces[mine].device());
      for (int64_t m = 0; m < n; ++m) {
        const Tensor& piece = m == me ? pieces[mine] : received[m];
        for_each_member_run(p, m, shards_, tp_, [&](const model::LocalRun& run) {
          copy_run(whole, piece, run, /*into_whole=*/true);
        });
      }
      transform(p, whole);
      for (int64_t m = 0; m < n; ++m) {
        const Tensor& piece = m == me ? pieces[mine] : received[m];
        piece.zero_();  // FSDP's padding rows stay zero
        for_each_member_run(p, m, shards_, tp_, [&](const model::LocalRun& run) {
          copy_run(whole, piece, run, /*into_whole=*/false);
        });
        if (m != me) {
          transfers.push_back({PeerTransfer::Direction::Send, piece, static_cast<int>(m), 0});
        }
      }
    }
    for (size_t i = round; i < end; ++i) {
      const int owner = static_cast<int>(i - round);
      if (owner != me) transfers.push_back({PeerTransfer::Direction::Recv, pieces[i], owner, 0});
    }
    for (Work& w : comm.point_to_point_async(transfers)) w.wait();
  }
}

}  // namespace titan::parallel
