// Context parallelism: a long sequence split over the cp ranks, with attention over the whole
// sequence computed by moving keys and values between them (docs/context_parallel.md,
// docs/architecture.md#decision-18). Every other op of the model is per token, so only
// attention and the split itself need to know.
//
// The head-tail split. S tokens are cut into 2·cp chunks of C = S/(2·cp); rank r holds chunks r
// and 2·cp − 1 − r, in that order. Under the causal mask a query sees every earlier chunk, so an
// early chunk has little work and a late one much; one of each gives every rank the same work:
//
//   cp 2, S = 8·c:  chunks 0 1 2 3      rank 0 holds 0 and 3, rank 1 holds 1 and 2
//
// Ring attention. Each rank keeps its queries; the K/V chunks travel around the ring (rank r
// sends to r + 1 and receives from r − 1), each step's transfer posted before, and overlapping
// with, the attention of the local queries over the K/V pair in hand (model/ops/
// attention_block.h). Partial results merge exactly by their log-sum-exp. A query chunk computes
// only the K/V chunks it sees: with head-tail every rank computes 2·cp + 1 chunk×chunk blocks
// (two of them diagonal), the lower triangle of the (2·cp)² grid shared evenly. The backward
// sends the K/V around again, with their gradients dK, dV travelling beside them, accumulated
// by each rank they pass and arriving home after cp hops.
//
// Under block_causal each rank holds the document starts of its own tokens (cut head-tail as the
// tokens are; they are global positions). A query chunk's keys begin at its first row's document
// start at the earliest, so the ring computes no block whose keys all lie before it (the K/V
// still pass through the rank on their way round), and the all-gather attends each query chunk
// over the keys from there only.
//
// All-gather attention (torchtitan's default rotate method, for comparison): K/V gathered once
// with all_gather, then each query chunk attends over the K/V of every position up to its own
// in one block; the backward reduce-scatters dK, dV to their owners.
//
// The blocks run on the tensors' device: the CPU twin, or the CUDA block kernels with the
// transfers on the NCCL communicator's stream. Results equal single-rank attention over the
// whole sequence to a few roundings (merging reorders the softmax sums).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/tensor.h"
#include "model/context_parallel_comm.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm_waits.h"
#include "parallel/context_parallel_seq_len.h"

namespace titan::parallel {

// ---- the head-tail split ----------------------------------------------------------------------

// check_cp_seq_len: context_parallel_seq_len.h.

// The global chunk index (of 2·cp) of a rank's local chunk 0 or 1.
int64_t cp_chunk_index(int64_t cp, int64_t rank, int64_t local_chunk);

// The global positions of a rank's S/cp tokens, in the order the rank holds them: the
// positions RoPE must rotate them by, and the rows of a [S, ·] table (rope cos, sin) to take
// with cp_shard(table, 0, cp, rank).
std::vector<int64_t> cp_positions(int64_t seq_len, int64_t cp, int64_t rank);

// full [..., S, ...] (the sequence along dim seq_dim: 1 for tokens [B, S] or activations
// [B, S, D], 0 for a table [S, ·]) -> this rank's [..., S/cp, ...]. Any device and dtype.
Tensor cp_shard(const Tensor& full, int seq_dim, int64_t cp, int64_t rank);

// The inverse: every rank's shard, in rank order -> the full tensor.
Tensor cp_unshard(const std::vector<Tensor>& shards, int seq_dim);

// The inverse across the cp group: every rank receives the full tensor (an all_gather).
Tensor cp_all_gather(Communicator& comm, const Tensor& shard, int seq_dim);

// ---- attention over the cp group --------------------------------------------------------------

// How K/V reach the other ranks (torchtitan: parallelism.context_parallel_rotate_method).
enum class CpRotateMethod { Ring, AllGather };
inline constexpr EnumName<CpRotateMethod> kCpRotateMethodList[] = {
    {CpRotateMethod::Ring, "ring"}, {CpRotateMethod::AllGather, "allgather"}};
inline constexpr EnumNames<CpRotateMethod> kCpRotateMethods{"method", kCpRotateMethodList};

// model::ContextParallelComm over the cp group's communicator. With one rank it is the local
// attention, unchanged. The K/V transfers' waits, their count and the blocks computed are
// counted into `waits` (comm_waits.h; a fresh one when none is given), read as cp_wait_ms.
class ContextParallelGroup final : public model::ContextParallelComm {
 public:
  ContextParallelGroup(std::shared_ptr<Communicator> comm, CpRotateMethod method,
                       std::shared_ptr<CommWaits> waits = nullptr);
  int64_t size() const override { return comm_->size(); }
  int64_t rank() const override { return comm_->rank(); }
  Tensor local_rows(const Tensor& table) const override {
    return size() == 1 ? table : cp_shard(table, 0, size(), rank());
  }
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                         const model::AttentionShape& shape,
                         const model::DocumentMask& mask) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                          const Tensor& out, const Tensor& lse, const model::AttentionShape& shape,
                          const model::DocumentMask& mask) override;

  CpRotateMethod method() const { return method_; }
  Communicator& comm() const { return *comm_; }
  CommWaits& waits() const { return *waits_; }

 private:
  std::shared_ptr<Communicator> comm_;
  CpRotateMethod method_;
  std::shared_ptr<CommWaits> waits_;
};

}  // namespace titan::parallel
