// Tensor parallelism with sequence parallelism (Megatron-LM's SP, torchtitan's plan): between
// the linears the residual stream is split by rows — each tp rank holds T/tp of the micro-
// batch's B·S tokens — and each linear moves its activations across the tp group itself:
//
//   column-parallel  (wqkv, w13, output)   x [T/tp, in] --all-gather--> [T, in] · W_rowsᵀ
//                                          -> y [T, out/tp]: this rank's heads / ffn / vocab
//                    backward              dx [T, in] partial --reduce-scatter--> [T/tp, in]
//   row-parallel     (wo, w2)              x [T, in/tp] · W_colsᵀ -> y [T, out] partial
//                                          --reduce-scatter--> [T/tp, out]
//                    backward              dy [T/tp, out] --all-gather--> [T, out]
//
// Every reduce-scatter follows exactly one GEMM and every all-gather precedes one (fused wqkv
// and w13, decision 3): the shape async TP decomposes into ring steps later.
#pragma once

#include <memory>

#include "model/linear.h"
#include "model/model_comm.h"
#include "parallel/communicator.h"

namespace titan::parallel {

// The collectives model code calls itself (loss parallel, the embedding's sequence split),
// over the tp group.
class TensorParallelGroup final : public model::TensorParallelComm {
 public:
  explicit TensorParallelGroup(std::shared_ptr<Communicator> comm);
  int64_t size() const override { return comm_->size(); }
  int64_t rank() const override { return comm_->rank(); }
  void all_reduce(const Tensor& t, model::ReduceOp op) override;
  Tensor reduce_scatter_rows(const Tensor& partial) override;
  Tensor all_gather_rows(const Tensor& shard) override;

  // Non-blocking forms the linear styles overlap with their GEMMs.
  Work all_gather_rows_async(const Tensor& full, const Tensor& shard);
  Work reduce_scatter_rows_async(const Tensor& shard, const Tensor& partial);

 private:
  std::shared_ptr<Communicator> comm_;
};

// Weight [out/tp, in]: this rank's output features; input sequence-sharded.
class ColumnParallelLinear final : public model::LinearStyle {
 public:
  explicit ColumnParallelLinear(std::shared_ptr<TensorParallelGroup> tp) : tp_(std::move(tp)) {}
  Tensor forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) override;
  Tensor backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                  model::LinearGemms& gemms) override;
  std::string name() const override { return "column-parallel"; }

 private:
  std::shared_ptr<TensorParallelGroup> tp_;
};

// Weight [out, in/tp]: this rank's input features; output sequence-sharded.
class RowParallelLinear final : public model::LinearStyle {
 public:
  explicit RowParallelLinear(std::shared_ptr<TensorParallelGroup> tp) : tp_(std::move(tp)) {}
  Tensor forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) override;
  Tensor backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                  model::LinearGemms& gemms) override;
  std::string name() const override { return "row-parallel"; }

 private:
  std::shared_ptr<TensorParallelGroup> tp_;
};

}  // namespace titan::parallel
