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
// and w13, docs/architecture.md#decision-3), so each is written here once, by hand, as tp steps
// over row chunks of T/tp rows — chunk c is rank c's sequence shard — in two schedules
// (docs/architecture.md#decision-10):
//
//   synchronous   move everything, then compute (the all-gather, or the exchange of the
//                 reduce-scatter's partials, waited on before or after the GEMM chunks)
//   async         the all-gather is a ring: at step s the chunk of rank (r+s) mod tp is in hand,
//                 sent on to rank r−1 while the chunk of rank (r+s+1) arrives from rank r+1 and
//                 the GEMM of the chunk in hand runs. The reduce-scatter is pipelined: the
//                 partial for rank (r+s) is sent while the partial for the next is computed.
//
// Both schedules run the same GEMMs on the same row chunks of the same prepared operands
// (model/linear.h's operand level: an FP8 operand is quantized once, before any transfer, and a
// chunk carries its rows' scales), and each rank sums the partials of its rows in rank order
// 0..tp−1; so async TP is bit-identical to synchronous TP on the CPU. (OpenBLAS's sgemm is not
// row-chunk invariant — a GEMM of rows [a, b) can differ in the last bit from those rows of the
// whole GEMM — which is why the synchronous schedule cuts its GEMMs the same way.)
//
// On the CPU each chunk's GEMM is cut into kCpuProgressSlices row slices and the posted
// transfers are tested (MPI_Test) between them: MPI moves a message above its eager limit only
// while the process is inside MPI. On CUDA the transfers run on the communication stream and
// the GEMM chunks on the compute stream, ordered by events (nccl_communicator.h).
//
// FP8 on the wire: with FP8 on, the all-gathered forward input travels as the FP8 codes of its
// prepared operand plus their row scales (rowwise, 1×128); a tensorwise scale is one scalar
// from a max all-reduce of the amax over tp, issued before the ring. Backward's gathers move
// high precision: the grad-weight GEMM contracts over the tokens, and its operands are quantized
// along them from high-precision values (docs/architecture.md#decision-8), which features-scaled
// codes cannot give.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/model_comm.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm_waits.h"

namespace titan::parallel {

// The collectives model code calls itself (loss parallel, the embedding's sequence split),
// over the tp group. Every tp wait — the linears' transfers and the model's own tp collectives —
// is timed into `waits` (comm_waits.h; a fresh one when none is given), read as tp_wait_ms;
// the linears also count their posted transfers, and those found complete between GEMM slices.
class TensorParallelGroup final : public model::TensorParallelComm {
 public:
  explicit TensorParallelGroup(std::shared_ptr<Communicator> comm,
                               std::shared_ptr<CommWaits> waits = nullptr);
  int64_t size() const override { return comm_->size(); }
  int64_t rank() const override { return comm_->rank(); }
  void all_reduce(const Tensor& t, model::ReduceOp op) override;
  Tensor reduce_scatter_rows(const Tensor& partial) override;
  Tensor all_gather_rows(const Tensor& shard) override;

  // Non-blocking forms the linear styles overlap with their GEMMs.
  Work all_gather_rows_async(const Tensor& full, const Tensor& shard);
  Work reduce_scatter_rows_async(const Tensor& shard, const Tensor& partial);

  Communicator& comm() const { return *comm_; }
  CommWaits& waits() const { return *waits_; }
  // work.wait(), the time counted as tp wait on `device`, where the transfer's tensors live
  // (core/wait_clock.h).
  void wait(Work& work, const Device& device) const;

 private:
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<CommWaits> waits_;
};

// How a tensor-parallel linear moves its activations, for the start-up table.
struct TpPattern {
  std::string forward, backward;
  bool overlapped = false;
};

// Weight [out/tp, in]: this rank's output features; input sequence-sharded.
// async: the ring schedule (parallelism.enable_async_tensor_parallel).
class ColumnParallelLinear final : public model::LinearStyle {
 public:
  explicit ColumnParallelLinear(std::shared_ptr<TensorParallelGroup> tp, bool async = false)
      : tp_(std::move(tp)), async_(async) {}
  Tensor forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) override;
  Tensor backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                  model::LinearGemms& gemms) override;
  std::string name() const override {
    return async_ ? "column-parallel (async)" : "column-parallel";
  }
  TpPattern pattern() const;

 private:
  std::shared_ptr<TensorParallelGroup> tp_;
  bool async_;
};

// Weight [out, in/tp]: this rank's input features; output sequence-sharded.
class RowParallelLinear final : public model::LinearStyle {
 public:
  explicit RowParallelLinear(std::shared_ptr<TensorParallelGroup> tp, bool async = false)
      : tp_(std::move(tp)), async_(async) {}
  Tensor forward(const Tensor& x, const Tensor& w, model::LinearGemms& gemms) override;
  Tensor backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                  model::LinearGemms& gemms) override;
  std::string name() const override { return async_ ? "row-parallel (async)" : "row-parallel"; }
  TpPattern pattern() const;

 private:
  std::shared_ptr<TensorParallelGroup> tp_;
  bool async_;
};

// Row slices per chunk GEMM on the CPU, with the posted transfers tested between them.
inline constexpr int64_t kCpuProgressSlices = 4;

}  // namespace titan::parallel
