// Collectives over one group of ranks, behind an interface that both backends implement:
// MPI (mpi_communicator.h: CPU tensors, and CUDA tensors staged through the host) and NCCL
// (nccl_communicator.h: CUDA tensors on a communication stream, CPU tensors handed to MPI).
//
// Every operation has a non-blocking form returning a Work handle; the blocking form is the
// non-blocking one followed by wait(). A Work keeps the tensors it was given alive until it
// completes, so a caller may drop its own references right after posting. Collectives must be
// posted in the same order on every rank of the group (as MPI and NCCL both require).
//
// Tensors are contiguous and are treated as flat arrays of their dtype; shapes are the
// caller's business. Reductions need a dtype the backend can add: f32, f64, i32, i64 and bf16
// (Avg of integers is refused: it would round silently); gathers move any
// dtype. What "complete" means differs: an MPI Work is complete when the host may read the
// result; an NCCL Work's wait() orders the current CUDA stream after the operation and returns
// without blocking the host (nccl_communicator.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace titan::parallel {

enum class ReduceOp { Sum, Avg, Max };

// One posted operation. A default-constructed Work is already complete.
class Work {
 public:
  // Backends implement this: wait() blocks until the operation is done (idempotent).
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;  // true once done, without blocking
  };

  Work() = default;
  explicit Work(std::shared_ptr<Pending> pending) : pending_(std::move(pending)) {}

  void wait() {
    if (pending_) pending_->wait();
    pending_.reset();
  }
  bool done() {
    if (pending_ && pending_->test()) pending_.reset();
    return pending_ == nullptr;
  }
  // One Work for several: waits for each, in order; done when all are.
  static Work all(std::vector<Work> works);
  // n handles on one operation: each waits on the whole of it (NCCL's grouped transfers, which
  // complete together).
  static std::vector<Work> shared(Work work, size_t n);

 private:
  std::shared_ptr<Pending> pending_;
};

namespace work_detail {
class AllPending final : public Work::Pending {
 public:
  explicit AllPending(std::vector<Work> works) : works_(std::move(works)) {}
  void wait() override {
    for (Work& w : works_) w.wait();
  }
  bool test() override {
    bool done = true;
    for (Work& w : works_) done = w.done() && done;  // tests every one: drives each's progress
    return done;
  }

 private:
  std::vector<Work> works_;
};
}  // namespace work_detail

inline Work Work::all(std::vector<Work> works) {
  return Work(std::make_shared<work_detail::AllPending>(std::move(works)));
}

namespace work_detail {
class SharedPending final : public Work::Pending {
 public:
  explicit SharedPending(std::shared_ptr<Work> work) : work_(std::move(work)) {}
  void wait() override { work_->wait(); }
  bool test() override { return work_->done(); }

 private:
  std::shared_ptr<Work> work_;
};
}  // namespace work_detail

inline std::vector<Work> Work::shared(Work work, size_t n) {
  auto one = std::make_shared<Work>(std::move(work));
  std::vector<Work> handles;
  for (size_t i = 0; i < n; ++i) handles.emplace_back(std::make_shared<work_detail::SharedPending>(one));
  return handles;
}

// One send or receive of a group posted together (Communicator::point_to_point_async).
// Messages between two ranks match in post order within a channel; different channels never
// match each other (MPI: a tag each). NCCL has one channel, 0.
struct PeerTransfer {
  enum class Direction { Send, Recv };
  Direction direction = Direction::Send;
  Tensor tensor;
  int peer = -1;
  int channel = 0;
};
inline constexpr int kPointToPointChannels = 4;  // channels 0 … 3

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int size() const = 0;
  virtual int rank() const = 0;
  // The mesh dims the group spans, for messages: "dp_shard", "dp_replicate×dp_shard", "world".
  virtual const std::string& name() const = 0;

  // out [size·n] = the ranks' in [n], in rank order.
  virtual Work all_gather_async(const Tensor& out, const Tensor& in) = 0;
  // out [n] = op over the ranks of their in[rank·n, (rank+1)·n).
  virtual Work reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) = 0;
  // t = op over the ranks of t, in place.
  virtual Work all_reduce_async(const Tensor& t, ReduceOp op) = 0;
  // t = root's t.
  virtual Work broadcast_async(const Tensor& t, int root) = 0;
  // Point to point within the group; a send matches the recv of the same peer and channel in
  // post order (PeerTransfer).
  virtual Work send_async(const Tensor& t, int peer, int channel = 0) = 0;
  virtual Work recv_async(const Tensor& t, int peer, int channel = 0) = 0;
  virtual Work barrier_async() = 0;
  // Sends `send` to send_peer and receives `recv` from recv_peer as one operation: a ring step
  // of async TP. NCCL groups the sends and receives (ncclGroupStart/End), so a ring of exchanges
  // cannot deadlock on the one communication stream; this default posts the receives, then the
  // sends (MPI, whose non-blocking point-to-point needs nothing more).
  virtual Work exchange_async(const std::vector<Tensor>& send, int send_peer,
                              const std::vector<Tensor>& recv, int recv_peer) {
    std::vector<Work> works;
    for (const Tensor& t : recv) works.push_back(recv_async(t, recv_peer));
    for (const Tensor& t : send) works.push_back(send_async(t, send_peer));
    return Work::all(std::move(works));
  }

  // Several sends and receives, to and from any peers, posted as one operation: a pipeline
  // stage's messages between two computes. Returns one Work per transfer, in the order given, so
  // that a receive's consumer waits for that receive alone, not for a send in the same group
  // that the peer matches only later. NCCL groups the transfers (ncclGroupStart/End), so that
  // neighbouring stages that each send to the other before they receive cannot deadlock on the
  // one communication stream, and the group completes as one: its handles share it. This
  // default posts the receives, then the sends (MPI), each complete on its own.
  virtual std::vector<Work> point_to_point_async(const std::vector<PeerTransfer>& transfers) {
    std::vector<Work> works(transfers.size());
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      if (t.direction == PeerTransfer::Direction::Recv) {
        works[i] = recv_async(t.tensor, t.peer, t.channel);
      }
    }
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      if (t.direction == PeerTransfer::Direction::Send) {
        works[i] = send_async(t.tensor, t.peer, t.channel);
      }
    }
    return works;
  }

  void all_gather(const Tensor& out, const Tensor& in) { all_gather_async(out, in).wait(); }
  void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
    reduce_scatter_async(out, in, op).wait();
  }
  void all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root).wait(); }
  void send(const Tensor& t, int peer) { send_async(t, peer).wait(); }
  void recv(const Tensor& t, int peer) { recv_async(t, peer).wait(); }
  void barrier() { barrier_async().wait(); }
};

}  // namespace titan::parallel
