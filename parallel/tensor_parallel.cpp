#include "parallel/tensor_parallel.h"

#include "core/check.h"

namespace titan::parallel {

namespace {

ReduceOp to_reduce_op(model::ReduceOp op) {
  return op == model::ReduceOp::Max ? ReduceOp::Max : ReduceOp::Sum;
}

}  // namespace

TensorParallelGroup::TensorParallelGroup(std::shared_ptr<Communicator> comm)
    : comm_(std::move(comm)) {
  TT_CHECK(comm_ != nullptr, "tensor parallel group without a communicator");
}

void TensorParallelGroup::all_reduce(const Tensor& t, model::ReduceOp op) {
  if (size() > 1) comm_->all_reduce(t, to_reduce_op(op));
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
  all_gather_rows_async(full, shard.contiguous()).wait();
  return full;
}

Tensor TensorParallelGroup::reduce_scatter_rows(const Tensor& partial) {
  if (size() == 1) return partial;
  TT_CHECK(partial.size(0) % size() == 0, "sequence parallel: ", partial.size(0),
           " rows do not split over ", size(), " tp ranks");
  Shape shape = partial.shape();
  shape[0] /= size();
  Tensor shard = Tensor::empty(shape, partial.dtype(), partial.device());
  reduce_scatter_rows_async(shard, partial.contiguous()).wait();
  return shard;
}

Tensor ColumnParallelLinear::forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) {
  Tensor x_full = tp_->all_gather_rows(x);  // [T, in]
  Tensor y = Tensor::empty({x_full.size(0), w.size(0)}, x.dtype(), x.device());
  gemms.output(y, x_full, w);
  return y;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                      const Tensor& dw, model::LinearGemms& gemms) {
  // The forward's gathered input was not kept (it is tp times the shard): gather it again,
  // while the grad-input GEMM runs, and reduce-scatter dx while the grad-weight GEMM runs.
  Tensor x_full = Tensor::empty({dy.size(0), x.size(1)}, x.dtype(), x.device());
  Work gather = tp_->all_gather_rows_async(x_full, x.contiguous());
  Tensor dx_partial = Tensor::empty({dy.size(0), x.size(1)}, x.dtype(), x.device());
  gemms.grad_input(dx_partial, dy, w);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Work scatter = tp_->reduce_scatter_rows_async(dx, dx_partial);
  gather.wait();
  gemms.grad_weight(dw, dy, x_full);
  scatter.wait();
  return dx;
}

Tensor RowParallelLinear::forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) {
  Tensor y_partial = Tensor::empty({x.size(0), w.size(0)}, x.dtype(), x.device());
  gemms.output(y_partial, x, w);
  return tp_->reduce_scatter_rows(y_partial);  // [T/tp, out]
}

Tensor RowParallelLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                   const Tensor& dw, model::LinearGemms& gemms) {
  Tensor dy_full = tp_->all_gather_rows(dy);  // [T, out]
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  gemms.grad_input(dx, dy_full, w);
  gemms.grad_weight(dw, dy_full, x);
  return dx;
}

}  // namespace titan::parallel
