#include "parallel/tensor_parallel_memory.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "parallel/memory_estimate.h"  // defines: replay::d
#include "parallel/tensor_parallel.h"  // defines: kCpuProgressSlices

namespace titan::parallel {

namespace {

using Bytes = MemoryTimeline::Bytes;
using model::GemmKind;
using model::GemmsMemory;
using model::LinearShape;
using model::PreparedOperand;

using replay::d;

// tensor_parallel.cpp's run_rows: the CPU cuts a chunk GEMM into up to kCpuProgressSlices row
// slices; the largest is the one whose buffers count.
int64_t largest_slice(int64_t rows, bool cuda) {
  const int64_t slices = cuda ? 1 : std::clamp<int64_t>(rows, 1, kCpuProgressSlices);
  int64_t most = 0;
  for (int64_t i = 0; i < slices; ++i)
    most = std::max(most, rows * (i + 1) / slices - rows * i / slices);
  return most;
}

// ColumnParallelLinear and RowParallelLinear (tensor_parallel.cpp), synchronous or async.
class TensorParallelStyle final : public model::LinearMemory {
 public:
  TensorParallelStyle(bool column, int64_t tp, bool async, bool cuda)
      : column_(column), n_(tp), async_(async), cuda_(cuda) {}

  Bytes forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                GemmsMemory& gemms) override {
    return column_ ? column_forward(t, rows, w, e, gemms) : row_forward(t, rows, w, e, gemms);
  }
  Bytes backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                 GemmsMemory& gemms, const Bytes& dy, const Bytes& x) override {
    return column_ ? column_backward(t, rows, w, e, gemms, dy, x)
                   : row_backward(t, rows, w, e, gemms, dy, x);
  }

 private:
  // gathered_operand: the operand's layout with tp times the rows (values, then row scales).
  std::vector<Bytes> gathered(MemoryTimeline& t, const PreparedOperand& local, int64_t rows) const {
    std::vector<Bytes> full{t.hold(d(rows * n_) * local.row_bytes)};
    if (local.row_scale_bytes > 0) full.push_back(t.hold(d(rows * n_) * local.row_scale_bytes));
    return full;
  }

  // gather_rows of tensors with these bytes per row, `rows` of them this rank's: the
  // synchronous all-gather sends a copy of this rank's rows, held until every gather completes;
  // the ring sends views. on_chunk runs once per chunk, after the gathers.
  template <class OnChunk>
  void gather_rows(MemoryTimeline& t, const std::vector<double>& row_bytes, int64_t rows,
                   OnChunk on_chunk) const {
    if (!async_) {
      std::vector<Bytes> sends;
      for (double b : row_bytes) sends.push_back(t.hold(d(rows) * b));
      sends.clear();
    }
    on_chunk();
  }

  // reduce_scatter_rows_of: n received and n − 1 sent chunks [rows, cols], the GEMMs, the sum.
  template <class Compute, class BeforeSum>
  Bytes reduce_scatter(MemoryTimeline& t, int64_t rows, int64_t cols, double e, Compute compute,
                       BeforeSum before_sum) const {
    std::vector<Bytes> chunks;
    for (int64_t i = 0; i < 2 * n_ - 1; ++i) chunks.push_back(t.hold(d(rows) * d(cols) * e));
    compute();
    before_sum();
    return t.hold(d(rows) * d(cols) * e);  // received[0].clone(), the partials then summed in
  }

  Bytes column_forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                       GemmsMemory& gemms) const {
    const PreparedOperand a_local = gemms.prepare_a(t, GemmKind::Output, rows, w.in, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::Output, w.out, w.in, e);
    const std::vector<Bytes> a = gathered(t, a_local, rows);  // [T, in]
    Bytes y = t.hold(d(rows * n_) * d(w.out) * e);
    std::vector<double> wire{a_local.row_bytes};
    if (a_local.row_scale_bytes > 0) wire.push_back(a_local.row_scale_bytes);
    gather_rows(t, wire, rows,
                [&] { gemms.run(t, GemmKind::Output, largest_slice(rows, cuda_), w.out, w.in); });
    return y;
  }

  // W's grad-weight GEMM of a deferred backward: the gathered operand [rows · tp, cols] made
  // (all_gather_rows), both prepared, run and let go.
  std::function<void(MemoryTimeline&)> gathered_grad_weight(GemmsMemory& gemms, int64_t rows,
                                                            const LinearShape& w, double e,
                                                            bool gathers_dy) const {
    const int64_t n = n_;
    return [&gemms, rows, w, e, gathers_dy, n](MemoryTimeline& t) {
      const Bytes full = t.hold(d(rows * n) * d(gathers_dy ? w.out : w.in) * e);
      gemms.whole(t, GemmKind::GradWeight, rows * n, w.out, rows * n, w.in, w.out, w.in, rows * n,
                  e, gathers_dy ? full : Bytes(), gathers_dy ? Bytes() : full);
    };
  }

  // dy: its bytes, the grad-weight GEMM's operand beside the gathered x; x: the rank's rows.
  Bytes column_backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                        GemmsMemory& gemms, const Bytes& dy, const Bytes& x) const {
    const PreparedOperand a = gemms.prepare_a(t, GemmKind::GradInput, rows * n_, w.out, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::GradInput, w.out, w.in, e);
    if (gemms.defers_grad_weight()) {  // W gathers x again
      return reduce_scatter(
          t, rows, w.in, e,
          [&] { gemms.run(t, GemmKind::GradInput, largest_slice(rows, cuda_), w.in, w.out); },
          [&] {
            gemms.defer_made({dy, x}, gathered_grad_weight(gemms, rows, w, e, false));
          });
    }
    const Bytes x_full = t.hold(d(rows * n_) * d(w.in) * e);
    Bytes x_send;  // the synchronous gather's copy of x, until before_sum waits for it
    if (!async_) x_send = t.hold(d(rows) * d(w.in) * e);
    return reduce_scatter(
        t, rows, w.in, e,
        [&] { gemms.run(t, GemmKind::GradInput, largest_slice(rows, cuda_), w.in, w.out); },
        [&] {
          x_send = {};
          gemms.whole(t, GemmKind::GradWeight, rows * n_, w.out, rows * n_, w.in, w.out, w.in,
                      rows * n_, e, dy, x_full);
        });
  }

  Bytes row_forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                    GemmsMemory& gemms) const {
    const int64_t out_rows = rows / n_;
    const PreparedOperand a = gemms.prepare_a(t, GemmKind::Output, rows, w.in, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::Output, w.out, w.in, e);
    return reduce_scatter(
        t, out_rows, w.out, e,
        [&] { gemms.run(t, GemmKind::Output, largest_slice(out_rows, cuda_), w.out, w.in); },
        [] {});
  }

  // x: its bytes, the grad-weight GEMM's operand beside the gathered dy; dy: the rank's rows.
  Bytes row_backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                     GemmsMemory& gemms, const Bytes& dy, const Bytes& x) const {
    const int64_t dy_rows = rows / n_;
    const PreparedOperand a_local = gemms.prepare_a(t, GemmKind::GradInput, dy_rows, w.out, e);
    const PreparedOperand b = gemms.prepare_b(t, GemmKind::GradInput, w.out, w.in, e);
    const Bytes dy_full = t.hold(d(rows) * d(w.out) * e);
    std::vector<double> wire{d(w.out) * e};
    std::vector<Bytes> a;
    if (!a_local.plain) {
      a = gathered(t, a_local, dy_rows);
      wire.push_back(a_local.row_bytes);
      if (a_local.row_scale_bytes > 0) wire.push_back(a_local.row_scale_bytes);
    }
    Bytes dx = t.hold(d(rows) * d(w.in) * e);
    gather_rows(t, wire, dy_rows, [&] {
      gemms.run(t, GemmKind::GradInput, largest_slice(dy_rows, cuda_), w.in, w.out);
    });
    if (gemms.defers_grad_weight()) {  // W gathers dy again
      gemms.defer_made({dy, x}, gathered_grad_weight(gemms, dy_rows, w, e, true));
    } else {
      gemms.whole(t, GemmKind::GradWeight, rows, w.out, rows, w.in, w.out, w.in, rows, e, dy_full,
                  x);
    }
    return dx;
  }

  bool column_;
  int64_t n_;
  bool async_, cuda_;
};

}  // namespace

std::unique_ptr<model::LinearMemory> tensor_parallel_linear_memory(bool column, int64_t tp,
                                                                   bool async, bool cuda) {
  return std::make_unique<TensorParallelStyle>(column, tp, async, cuda);
}

}  // namespace titan::parallel
