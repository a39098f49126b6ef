#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <functional>

#include "core/check.h"
#include "model/ops/tensor_math.h"

namespace titan::parallel {

namespace {

ReduceOp to_reduce_op(model::ReduceOp op) {
  return op == model::ReduceOp::Max ? ReduceOp::Max : ReduceOp::Sum;
}

// The transfers one style has posted and not yet waited for: tested between GEMM slices (which
// is what moves an MPI message past its eager limit), waited for where a result is needed.
class InFlight {
 public:
  InFlight(const TensorParallelGroup& tp, Device device) : tp_(tp), device_(device) {}
  void post(Work work) { works_.push_back({std::move(work), false}); }
  void poll() {
    for (Posted& p : works_) {
      if (!p.done && p.work.done()) {
        p.done = true;
        tp_.waits().count_finished_during_compute();
      }
    }
  }
  void wait_all() {
    for (Posted& p : works_) {
      tp_.waits().count_transfer();
      tp_.wait(p.work, device_);
    }
    works_.clear();
  }

 private:
  struct Posted {
    Work work;
    bool done;
  };
  const TensorParallelGroup& tp_;
  Device device_;
  std::vector<Posted> works_;
};

using Poll = std::function<void()>;

// out = the GEMM of the rows of a (out holds as many), in row slices on the CPU with `poll`
// between them. Both schedules call it with the same rows, so they compute the same values.
void run_rows(model::LinearGemms& gemms, model::GemmKind kind, const Tensor& out,
              const model::GemmOperand& a, const model::GemmOperand& b, const Poll& poll) {
  const int64_t rows = a.rows();
  const int64_t slices =
      out.device().is_cpu() ? std::clamp<int64_t>(rows, 1, kCpuProgressSlices) : 1;
  for (int64_t i = 0; i < slices; ++i) {
    const int64_t start = rows * i / slices, end = rows * (i + 1) / slices;
    if (i > 0 && poll) poll();
    if (end > start) gemms.run(kind, out.rows(start, end), a.row_block(start, end), b);
  }
}

std::vector<Tensor> row_blocks(const std::vector<Tensor>& full, int64_t chunk, int64_t rows) {
  std::vector<Tensor> blocks;
  for (const Tensor& t : full) blocks.push_back(t.rows(chunk * rows, (chunk + 1) * rows));
  return blocks;
}

// Rows [shard·R, (shard+1)·R) of each full tensor hold this rank's shard already; fills in the
// other ranks' and calls on_chunk(c) for every chunk c once its rows are in — all gathered
// first (synchronous), or as a ring with each chunk's GEMM overlapping the next transfer.
void gather_rows(const TensorParallelGroup& tp, const std::vector<Tensor>& full, int64_t rows,
                 bool ring, const std::function<void(int64_t, const Poll&)>& on_chunk) {
  const int64_t n = tp.size(), r = tp.rank();
  InFlight flight(tp, full.front().device());
  if (!ring) {
    for (const Tensor& t : full) {
      flight.post(tp.comm().all_gather_async(t, t.rows(r * rows, (r + 1) * rows).clone()));
    }
    flight.wait_all();
    for (int64_t c = 0; c < n; ++c) on_chunk(c, {});
    return;
  }
  const int prev = static_cast<int>((r + n - 1) % n), next = static_cast<int>((r + 1) % n);
  for (int64_t s = 0; s < n; ++s) {
    const int64_t c = (r + s) % n;
    if (s + 1 < n) {
      flight.post(tp.comm().exchange_async(row_blocks(full, c, rows), prev,
                                           row_blocks(full, (c + 1) % n, rows), next));
    }
    on_chunk(c, [&flight] { flight.poll(); });
    flight.wait_all();
  }
}

// The reduce-scatter of a GEMM's partial [T, N], T = tp·R: compute(d, out, poll) writes the
// partial of rank d's rows into out [R, N]; returns this rank's rows of the sum, added in rank
// order 0..tp−1 whatever the schedule. Synchronous: every partial, then one exchange. Async: the
// partial for rank r+s is sent while the one for r+s+1 is computed, this rank's own last.
// `each_step(s)` runs before step s's GEMM (column-parallel backward advances its gather of x
// there), `before_sum` once every GEMM is issued (its grad-weight GEMM hides the last sends).
struct ReduceScatterHooks {
  std::function<void(int64_t)> each_step;
  std::function<void(InFlight&)> before_sum;
};

Tensor reduce_scatter_rows_of(
    const TensorParallelGroup& tp, const Shape& chunk, DType dtype, Device device, bool pipelined,
    const std::function<void(int64_t, const Tensor&, const Poll&)>& compute, InFlight& flight,
    const ReduceScatterHooks& hooks = {}) {
  const int64_t n = tp.size(), r = tp.rank();
  std::vector<Tensor> received(n), sent(n);
  for (int64_t i = 0; i < n; ++i) {
    received[i] = Tensor::empty(chunk, dtype, device);
    if (i != r) sent[i] = Tensor::empty(chunk, dtype, device);
  }
  const Poll poll = [&flight] { flight.poll(); };
  auto exchange = [&](int64_t s) {
    const int64_t to = (r + s) % n, from = (r + n - s) % n;
    flight.post(tp.comm().exchange_async({sent[to]}, static_cast<int>(to), {received[from]},
                                         static_cast<int>(from)));
  };
  for (int64_t s = 1; s < n; ++s) {
    if (hooks.each_step) hooks.each_step(s);
    compute((r + s) % n, sent[(r + s) % n], poll);
    if (pipelined) exchange(s);
  }
  if (!pipelined) {
    for (int64_t s = 1; s < n; ++s) exchange(s);
  }
  compute(r, received[r], poll);
  if (hooks.before_sum) hooks.before_sum(flight);
  flight.wait_all();
  Tensor sum = received[0].clone();
  for (int64_t i = 1; i < n; ++i) model::accumulate(sum, received[i]);
  return sum;
}

// A prepared operand of `rows` rows with this rank's `local` rows in its shard's place.
model::GemmOperand gathered_operand(const model::GemmOperand& local, int64_t n, int64_t rank) {
  model::GemmOperand full = local.with_rows(local.rows() * n);
  const model::GemmOperand mine = full.row_block(rank * local.rows(), (rank + 1) * local.rows());
  mine.values.copy_from(local.values);
  if (local.row_scales.defined()) mine.row_scales.copy_from(local.row_scales);
  if (local.adapter_rows.defined()) mine.adapter_rows.copy_from(local.adapter_rows);
  return full;
}

}  // namespace

TensorParallelGroup::TensorParallelGroup(std::shared_ptr<Communicator> comm,
                                         std::shared_ptr<CommWaits> waits)
    : comm_(std::move(comm)), waits_(std::move(waits)) {
  TT_CHECK(comm_ != nullptr, "tensor parallel group without a communicator");
  if (waits_ == nullptr) waits_ = std::make_shared<CommWaits>();
}

void TensorParallelGroup::wait(Work& work, const Device& device) const {
  const WaitClock::Scope timed(waits_->clock(), device);
  work.wait();
}

void TensorParallelGroup::all_reduce(const Tensor& t, model::ReduceOp op) {
  if (size() == 1) return;
  Work work = comm_->all_reduce_async(t, to_reduce_op(op));
  wait(work, t.device());
}

Work TensorParallelGroup::all_gather_rows_async(const Tensor& full, const Tensor& shard) {
  TT_CHECK(full.size(0) == shard.size(0) * size(), "all_gather_rows: ", shard, " -> ", full,
           " over ", size(), " ranks");
  return comm_->all_gather_async(full, shard);
}

Work TensorParallelGroup::reduce_scatter_rows_async(const Tensor& shard, const Tensor& partial) {
  TT_CHECK(partial.size(0) == shard.size(0) * size(), "reduce_scatter_rows: ", partial, " -> ",
           shard, " over ", size(), " ranks");
  return comm_->reduce_scatter_async(shard, partial, ReduceOp::Sum);
}

Tensor TensorParallelGroup::all_gather_rows(const Tensor& shard) {
  if (size() == 1) return shard;
  Shape shape = shard.shape();
  shape[0] *= size();
  Tensor full = Tensor::empty(shape, shard.dtype(), shard.device());
  Work work = all_gather_rows_async(full, shard.contiguous());
  wait(work, shard.device());
  return full;
}

Tensor TensorParallelGroup::reduce_scatter_rows(const Tensor& partial) {
  if (size() == 1) return partial;
  TT_CHECK(partial.size(0) % size() == 0, "sequence parallel: ", partial.size(0),
           " rows do not split over ", size(), " tp ranks");
  Shape shape = partial.shape();
  shape[0] /= size();
  Tensor shard = Tensor::empty(shape, partial.dtype(), partial.device());
  Work work = reduce_scatter_rows_async(shard, partial.contiguous());
  wait(work, partial.device());
  return shard;
}

TpPattern ColumnParallelLinear::pattern() const {
  if (async_) {
    return {"ring all-gather(x) ∥ GEMM chunks",
            "GEMM chunks ∥ reduce-scatter(dx); ring all-gather(x) ∥ grad-input; "
            "grad-weight ∥ last sends",
            true};
  }
  return {"all-gather(x) → GEMM",
          "all-gather(x) ∥ grad-input GEMM → reduce-scatter(dx) ∥ grad-weight GEMM", false};
}

TpPattern RowParallelLinear::pattern() const {
  if (async_) {
    return {"GEMM chunks ∥ reduce-scatter(y)", "ring all-gather(dy) ∥ grad-input GEMM chunks",
            true};
  }
  return {"GEMM → reduce-scatter(y)", "all-gather(dy) → GEMMs", false};
}

Tensor ColumnParallelLinear::forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) {
  const int64_t n = tp_->size(), r = tp_->rank(), rows = x.size(0);
  // Quantized once, here, before anything moves: the ring carries codes and their row scales.
  const model::GemmOperand a_local = gemms.prepare_a(model::GemmKind::Output, x);
  const model::GemmOperand b = gemms.prepare_b(model::GemmKind::Output, w);
  const model::GemmOperand a = gathered_operand(a_local, n, r);  // [T, in]
  Tensor y = Tensor::empty({rows * n, w.size(0)}, x.dtype(), x.device());
  gather_rows(*tp_, a.wire(), rows, async_, [&](int64_t c, const Poll& poll) {
    run_rows(gemms, model::GemmKind::Output, y.rows(c * rows, (c + 1) * rows),
             a.row_block(c * rows, (c + 1) * rows), b, poll);
  });
  return y;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                      const Tensor& dw, model::LinearGemms& gemms) {
  // The forward's gathered input was not kept (it is tp times the shard): gather it again, in
  // high precision for the grad-weight GEMM, while the grad-input GEMM runs. A deferred
  // grad-weight GEMM gathers it when it runs, in W (model/weight_grad_queue.h).
  const int64_t n = tp_->size(), r = tp_->rank(), rows = x.size(0);
  const model::GemmOperand a = gemms.prepare_a(model::GemmKind::GradInput, dy);  // [T, out/tp]
  const model::GemmOperand b = gemms.prepare_b(model::GemmKind::GradInput, w);
  if (gemms.defers_grad_weight()) {
    InFlight flight(*tp_, x.device());
    ReduceScatterHooks hooks;
    hooks.before_sum = [&](InFlight&) {
      gemms.grad_weight_of(
          dw, [dy] { return dy; },
          [tp = tp_, x = x.contiguous()] { return tp->all_gather_rows(x); });
    };
    return reduce_scatter_rows_of(
        *tp_, Shape{rows, x.size(1)}, x.dtype(), x.device(), async_,
        [&](int64_t d, const Tensor& out, const Poll& poll) {
          run_rows(gemms, model::GemmKind::GradInput, out, a.row_block(d * rows, (d + 1) * rows), b,
                   poll);
        },
        flight, hooks);
  }
  Tensor x_full = Tensor::empty({rows * n, x.size(1)}, x.dtype(), x.device());
  x_full.rows(r * rows, (r + 1) * rows).copy_from(x);
  InFlight flight(*tp_, x.device());
  InFlight gather(*tp_, x.device());
  ReduceScatterHooks hooks;
  const int prev = static_cast<int>((r + n - 1) % n), next = static_cast<int>((r + 1) % n);
  if (async_) {
    // Ring step s−1 of the gather of x rides along with step s of the reduce-scatter.
    hooks.each_step = [&](int64_t s) {
      gather.wait_all();
      const int64_t c = (r + s - 1) % n;
      gather.post(tp_->comm().exchange_async(row_blocks({x_full}, c, rows), prev,
                                             row_blocks({x_full}, (c + 1) % n, rows), next));
    };
  } else {
    gather.post(tp_->comm().all_gather_async(x_full, x.contiguous().clone()));
  }
  hooks.before_sum = [&](InFlight&) {
    gather.wait_all();
    gemms.grad_weight(dw, dy, x_full);
  };
  auto compute = [&](int64_t d, const Tensor& out, const Poll& poll) {
    run_rows(gemms, model::GemmKind::GradInput, out, a.row_block(d * rows, (d + 1) * rows), b, [&] {
      if (poll) poll();
      gather.poll();
    });
  };
  return reduce_scatter_rows_of(*tp_, Shape{rows, x.size(1)}, x.dtype(), x.device(), async_,
                                compute, flight, hooks);
}

Tensor RowParallelLinear::forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) {
  const int64_t n = tp_->size(), tokens = x.size(0);
  TT_CHECK(tokens % n == 0, "sequence parallel: ", tokens, " rows do not split over ", n,
           " tp ranks");
  const int64_t rows = tokens / n;
  const model::GemmOperand a = gemms.prepare_a(model::GemmKind::Output, x);  // [T, in/tp]
  const model::GemmOperand b = gemms.prepare_b(model::GemmKind::Output, w);
  InFlight flight(*tp_, x.device());
  return reduce_scatter_rows_of(
      *tp_, Shape{rows, w.size(0)}, x.dtype(), x.device(), async_,
      [&](int64_t d, const Tensor& out, const Poll& poll) {
        run_rows(gemms, model::GemmKind::Output, out, a.row_block(d * rows, (d + 1) * rows), b,
                 poll);
      },
      flight);
}

Tensor RowParallelLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                   const Tensor& dw, model::LinearGemms& gemms) {
  const int64_t n = tp_->size(), r = tp_->rank(), rows = dy.size(0);
  // dy's operand is prepared once from this rank's rows (a tensorwise amax is reduced over tp
  // first, so the codes are those of the gathered dy); the high-precision dy travels too when
  // the operand is not dy itself, for the grad-weight GEMM, which contracts over the tokens.
  const model::GemmOperand a_local = gemms.prepare_a(model::GemmKind::GradInput, dy);
  const model::GemmOperand b = gemms.prepare_b(model::GemmKind::GradInput, w);
  Tensor dy_full = Tensor::empty({rows * n, dy.size(1)}, dy.dtype(), dy.device());
  dy_full.rows(r * rows, (r + 1) * rows).copy_from(dy);
  // The operand is dy itself: the gather of dy is the gather of the operand.
  const bool same = a_local.is_the_input && !a_local.adapter_rows.defined();
  model::GemmOperand a = a_local;
  std::vector<Tensor> wire{dy_full};
  if (same) {
    a.values = dy_full;
  } else {
    a = gathered_operand(a_local, n, r);
    for (const Tensor& t : a.wire()) wire.push_back(t);
  }
  Tensor dx = Tensor::empty({rows * n, x.size(1)}, x.dtype(), x.device());
  gather_rows(*tp_, wire, rows, async_, [&](int64_t c, const Poll& poll) {
    run_rows(gemms, model::GemmKind::GradInput, dx.rows(c * rows, (c + 1) * rows),
             a.row_block(c * rows, (c + 1) * rows), b, poll);
  });
  if (gemms.defers_grad_weight()) {
    // W gathers dy again rather than holding it gathered from now on.
    gemms.grad_weight_of(
        dw, [tp = tp_, dy = dy.contiguous()] { return tp->all_gather_rows(dy); },
        [x] { return x; });
  } else {
    gemms.grad_weight(dw, dy_full, x);
  }
  return dx;
}

}  // namespace titan::parallel
