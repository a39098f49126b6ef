#include "parallel/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/profiler.h"
#include "parallel/comm/collective_checks.h"
#include "parallel/comm/nccl_watchdog.h"
#include "parallel/comm/mpi_failure.h"

// TT_NCCL_CHECK(call): throws titan::Error naming the call, NCCL's error and its last message.
#define TT_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    ncclResult_t tt_nccl_status = (call);                                                          \
    if (tt_nccl_status != ncclSuccess) [[unlikely]]                                                \
      ::titan::detail::check_failed(                                                               \
          #call, ::titan::detail::concat("NCCL error: ", ncclGetErrorString(tt_nccl_status), " (", \
                                         ncclGetLastError(nullptr), ")"));                         \
  } while (0)

namespace titan::parallel {
namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  TT_CHECK(false, "unknown ReduceOp ", static_cast<int>(op));
}

// An NCCL type of the element's size, so that any dtype moves as whole elements. FP8 codes and
// bytes move as uint8 (bits, not numbers): they are gathered, never reduced.
ncclDataType_t element_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::BF16: return ncclBfloat16;
    case DType::E4M3:
    case DType::E5M2:
    case DType::U8: return ncclUint8;
  }
  TT_CHECK(false, "unknown dtype ", static_cast<int>(dtype));
}

// The highest priority the current device offers: a collective or a message on the critical
// path should not queue behind compute kernels.
int highest_stream_priority() {
  int least = 0, greatest = 0;
  TT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return greatest;
}

// The device's communication stream: created on first use, at the highest priority, never
// destroyed (work may still be queued on it while static destructors run).
cudaStream_t communication_stream(int device) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static cudaStream_t streams[kMaxDevices] = {};
  std::lock_guard lock(mutex);
  TT_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  if (streams[device] == nullptr) {
    TT_CUDA_CHECK(cudaStreamCreateWithPriority(&streams[device], cudaStreamNonBlocking,
                                               highest_stream_priority()));
  }
  return streams[device];
}

// NCCL refuses two ranks on one GPU of one host ("Duplicate GPU detected", deep in init); say
// it first, in the caller's terms (`backend_key`). Every rank of a shared GPU finds its partner,
// so all of them fail alike. NCCL_HOSTID set by hand (test/parallel/gpu_rank.h) means the sharing
// is chosen.
void check_one_gpu_per_rank(int device, int rank, int size, const std::string& backend_key) {
  if (std::getenv("NCCL_HOSTID") != nullptr) return;
  struct Place {
    char host[64];
    char bus[32];  // "0000:1b:00.0"
  };
  Place mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  TT_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.bus, sizeof mine.bus, device));
  std::vector<Place> places(static_cast<size_t>(size));
  TT_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, places.data(), sizeof mine, MPI_BYTE,
                             MPI_COMM_WORLD));
  for (int other = 0; other < size; ++other) {
    const Place& p = places[other];
    if (other == rank || std::strcmp(p.host, mine.host) != 0 || std::strcmp(p.bus, mine.bus) != 0)
      continue;
    input_error(backend_key, ": nccl needs a GPU of its own for every rank, but ranks ",
                std::min(rank, other), " and ", std::max(rank, other), " share cuda:", device,
                " (PCI ", mine.bus, ") on ", mine.host, "; use ", backend_key,
                ": mpi to share GPUs, or start one rank per GPU");
  }
}

// A posted operation, seen from its Work. `wait_name` is the profiler span of wait(): on the
// host it is instant, and its device interval on the current stream is where compute stalls
// for the collective (exposed communication).
class NcclPending final : public Work::Pending {
 public:
  NcclPending(std::shared_ptr<NcclInFlight> op, const char* wait_name)
      : op_(std::move(op)), wait_name_(wait_name) {}

  void wait() override {
    profiler::Span span(wait_name_, "comm");
    op_->done.wait(cuda::current_stream());
  }

  bool test() override { return op_->done.query(); }

 private:
  std::shared_ptr<NcclInFlight> op_;
  const char* wait_name_;
};

// "f32 × 16"
std::string elements(const Tensor& t, const char* suffix = "") {
  return detail::concat(dtype_name(t.dtype()), " × ", t.numel(), suffix);
}

}  // namespace

class NcclWorld {
 public:
  NcclWorld(double timeout_s, const std::string& backend_key) : timeout_s_(timeout_s) {
    TT_CHECK(timeout_s > 0, "NCCL world: the timeout must be positive, got ", timeout_s);
    device_ = cuda::current_device();
    stream_ = communication_stream(device_);
    int size = 0, rank = 0;
    TT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    check_one_gpu_per_rank(device_, rank, size, backend_key);

    // Rank 0 sends its status with the id, so that a failure there fails every rank instead of
    // leaving the others in the broadcast.
    struct {
      int ok;
      ncclUniqueId id;
    } start{};
    std::string why;
    if (rank == 0) {
      const ncclResult_t result = ncclGetUniqueId(&start.id);
      start.ok = result == ncclSuccess;
      if (!start.ok)
        why = detail::concat(ncclGetErrorString(result), " (", ncclGetLastError(nullptr), ")");
    }
    TT_MPI_CHECK(MPI_Bcast(&start, sizeof start, MPI_BYTE, 0, MPI_COMM_WORLD));
    TT_CHECK(start.ok, "NCCL world: ncclGetUniqueId failed on rank 0", why.empty() ? "" : ": ",
             why);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.commName = "titan world";
    TT_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size, start.id, rank, &config));
    watchdog_ = NcclWatchdog::shared(device_, rank);
    watchdog_->add_comm(comm_, "world");
  }

  // After every communicator split from it (they hold it). In-flight operations finish first,
  // still watched.
  ~NcclWorld() {
    cudaStreamSynchronize(stream_);
    watchdog_->remove_comm(comm_);
    ncclCommDestroy(comm_);
  }
  NcclWorld(const NcclWorld&) = delete;
  NcclWorld& operator=(const NcclWorld&) = delete;

  ncclComm_t comm() const { return comm_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  double timeout_s() const { return timeout_s_; }
  NcclWatchdog& watchdog() const { return *watchdog_; }

 private:
  double timeout_s_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::shared_ptr<NcclWatchdog> watchdog_;
};

namespace {

class NcclCommunicator final : public Communicator {
 public:
  // On the world's communication stream, or (`own_stream`) on a stream of its own: a pipeline
  // peer channel's (peer_channels.h), whose receives wait for their sender without holding up
  // any other communicator's work.
  NcclCommunicator(std::shared_ptr<NcclWorld> world, std::shared_ptr<Communicator> cpu,
                   bool own_stream)
      : world_(std::move(world)), cpu_(std::move(cpu)), owns_stream_(own_stream) {
    if (owns_stream_) {
      TT_CUDA_CHECK(
          cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, highest_stream_priority()));
    } else {
      stream_ = world_->stream();
    }
  }

  // Collective over the world, like the MPI split that made `cpu_`.
  void split(int color, int key) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    const std::string comm_name = "titan " + name();
    config.commName = comm_name.c_str();
    TT_NCCL_CHECK(ncclCommSplit(world_->comm(), color, key, &comm_, &config));
    int count = 0, rank = 0;
    TT_NCCL_CHECK(ncclCommCount(comm_, &count));
    TT_NCCL_CHECK(ncclCommUserRank(comm_, &rank));
    TT_CHECK(count == cpu_->size() && rank == cpu_->rank(), "NCCL split of ", name(),
             " came out as rank ", rank, " of ", count, ", but its MPI twin is rank ", cpu_->rank(),
             " of ", cpu_->size());
    world_->watchdog().add_comm(comm_, name());
  }

  ~NcclCommunicator() override {
    if (comm_ != nullptr) {
      cudaStreamSynchronize(stream_);
      world_->watchdog().remove_comm(comm_);
      ncclCommDestroy(comm_);
    }
    // The watchdog may still query an operation's end event recorded here: an event outlives
    // its stream.
    if (owns_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return cpu_->size(); }
  int rank() const override { return cpu_->rank(); }
  const std::string& name() const override { return cpu_->name(); }

  Work all_gather_async(const Tensor& out, const Tensor& in) override {
    const std::string what = "all_gather on " + name();
    if (on_cpu(what, {{"out", &out}, {"in", &in}})) return cpu_->all_gather_async(out, in);
    check_same_dtype(what, out, in);
    check_gather_counts(what, out, in, *this);
    check_disjoint(what, out, in);
    return post("all_gather", "all_gather.wait", in,
                detail::concat(what, " (", elements(in, " per rank"), ")"), {out, in},
                [&](cudaStream_t stream) {
                  return ncclAllGather(in.raw_data(), out.raw_data(), in.numel(),
                                       element_type(in.dtype()), comm_, stream);
                });
  }

  Work reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) override {
    const std::string what = detail::concat("reduce_scatter(", reduce_op_name(op), ") on ", name());
    if (on_cpu(what, {{"out", &out}, {"in", &in}})) {
      return cpu_->reduce_scatter_async(out, in, op);
    }
    check_same_dtype(what, out, in);
    check_reducible(what, in.dtype(), op);
    check_scatter_counts(what, out, in, *this);
    check_disjoint(what, out, in);
    return post("reduce_scatter", "reduce_scatter.wait", in,
                detail::concat(what, " (", elements(out, " per rank"), ")"), {out, in},
                [&](cudaStream_t stream) {
                  return ncclReduceScatter(in.raw_data(), out.raw_data(), out.numel(),
                                           element_type(in.dtype()), nccl_op(op), comm_, stream);
                });
  }

  Work all_reduce_async(const Tensor& t, ReduceOp op) override {
    const std::string what = detail::concat("all_reduce(", reduce_op_name(op), ") on ", name());
    if (on_cpu(what, {{"t", &t}})) return cpu_->all_reduce_async(t, op);
    check_reducible(what, t.dtype(), op);
    return post("all_reduce", "all_reduce.wait", t, detail::concat(what, " (", elements(t), ")"),
                {t}, [&](cudaStream_t stream) {
                  return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(),
                                       element_type(t.dtype()), nccl_op(op), comm_, stream);
                });
  }

  Work broadcast_async(const Tensor& t, int root) override {
    const std::string what = detail::concat("broadcast from ", root, " on ", name());
    if (on_cpu(what, {{"t", &t}})) return cpu_->broadcast_async(t, root);
    check_rank(what, "root", root, *this);
    return post("broadcast", "broadcast.wait", t, detail::concat(what, " (", elements(t), ")"), {t},
                [&](cudaStream_t stream) {
                  return ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(),
                                       element_type(t.dtype()), root, comm_, stream);
                });
  }

  Work send_async(const Tensor& t, int peer, int channel) override {
    const std::string what = detail::concat("send to ", peer, " on ", name());
    if (on_cpu(what, {{"t", &t}})) return cpu_->send_async(t, peer, channel);
    check_one_channel(what, channel);
    check_peer(what, peer);
    return post("send", "send.wait", t, detail::concat(what, " (", elements(t), ")"), {t},
                [&](cudaStream_t stream) {
                  return ncclSend(t.raw_data(), t.numel(), element_type(t.dtype()), peer, comm_,
                                  stream);
                });
  }

  Work recv_async(const Tensor& t, int peer, int channel) override {
    const std::string what = detail::concat("recv from ", peer, " on ", name());
    if (on_cpu(what, {{"t", &t}})) return cpu_->recv_async(t, peer, channel);
    check_one_channel(what, channel);
    check_peer(what, peer);
    return post("recv", "recv.wait", t, detail::concat(what, " (", elements(t), ")"), {t},
                [&](cudaStream_t stream) {
                  return ncclRecv(t.raw_data(), t.numel(), element_type(t.dtype()), peer, comm_,
                                  stream);
                });
  }

  Work barrier_async() override { return cpu_->barrier_async(); }

  // One NCCL group: every rank of a ring posts its send and its receive together, so no rank's
  // send waits on the stream for a receive posted behind another send.
  Work exchange_async(const std::vector<Tensor>& send, int send_peer,
                      const std::vector<Tensor>& recv, int recv_peer) override {
    const std::string what =
        detail::concat("exchange (send to ", send_peer, ", recv from ", recv_peer, ") on ", name());
    TT_CHECK(!send.empty() && send.size() == recv.size(), what, ": ", send.size(),
             " tensors to send and ", recv.size(), " to receive");
    bool all_cpu = true, any_cpu = false;
    for (const std::vector<Tensor>* list : {&send, &recv}) {
      for (const Tensor& t : *list) {
        const bool cpu = on_cpu(what, {{"tensor", &t}});
        all_cpu = all_cpu && cpu;
        any_cpu = any_cpu || cpu;
      }
    }
    if (all_cpu) return cpu_->exchange_async(send, send_peer, recv, recv_peer);
    TT_CHECK(!any_cpu, what, ": mixes CPU and CUDA tensors; pass every tensor on one device");
    check_peer(what, send_peer);
    check_peer(what, recv_peer);
    std::vector<Tensor> keep = send;
    keep.insert(keep.end(), recv.begin(), recv.end());
    return post("exchange", "exchange.wait", send.front(), what, std::move(keep),
                [&](cudaStream_t stream) {
                  ncclResult_t result = ncclGroupStart();
                  for (const Tensor& t : send) {
                    if (result != ncclSuccess) break;
                    result = ncclSend(t.raw_data(), t.numel(), element_type(t.dtype()), send_peer,
                                      comm_, stream);
                  }
                  for (const Tensor& t : recv) {
                    if (result != ncclSuccess) break;
                    result = ncclRecv(t.raw_data(), t.numel(), element_type(t.dtype()), recv_peer,
                                      comm_, stream);
                  }
                  const ncclResult_t end = ncclGroupEnd();
                  return result != ncclSuccess ? result : end;
                });
  }

  std::vector<Work> point_to_point_async(const std::vector<PeerTransfer>& transfers) override {
    const std::string what =
        detail::concat("point-to-point group of ", transfers.size(), " transfers on ", name());
    TT_CHECK(!transfers.empty(), what, ": nothing to send or receive");
    bool all_cpu = true, any_cpu = false;
    for (const PeerTransfer& t : transfers) {
      const bool cpu = on_cpu(what, {{"tensor", &t.tensor}});
      all_cpu = all_cpu && cpu;
      any_cpu = any_cpu || cpu;
      check_peer(what, t.peer);
    }
    if (all_cpu) return cpu_->point_to_point_async(transfers);
    TT_CHECK(!any_cpu, what, ": mixes CPU and CUDA tensors; pass every tensor on one device");
    std::vector<Tensor> keep;
    for (const PeerTransfer& t : transfers) {
      check_one_channel(what, t.channel);
      keep.push_back(t.tensor);
    }
    Work group = post("point_to_point", "point_to_point.wait", transfers.front().tensor, what,
                      std::move(keep), [&](cudaStream_t stream) {
                        ncclResult_t result = ncclGroupStart();
                        for (const PeerTransfer& t : transfers) {
                          if (result != ncclSuccess) break;
                          result =
                              t.direction == PeerTransfer::Direction::Send
                                  ? ncclSend(t.tensor.raw_data(), t.tensor.numel(),
                                             element_type(t.tensor.dtype()), t.peer, comm_, stream)
                                  : ncclRecv(t.tensor.raw_data(), t.tensor.numel(),
                                             element_type(t.tensor.dtype()), t.peer, comm_, stream);
                        }
                        const ncclResult_t end = ncclGroupEnd();
                        return result != ncclSuccess ? result : end;
                      });
    // The group completes as one operation on the stream: every transfer's handle is it.
    return Work::shared(std::move(group), transfers.size());
  }

 private:
  using Roles = std::initializer_list<std::pair<const char*, const Tensor*>>;

  // NCCL matches a pair's messages in post order on the one stream: a communicator has
  // channel 0 only, and more channels are more communicators (peer_channels.h).
  static void check_one_channel(const std::string& what, int channel) {
    TT_CHECK(channel == 0, what, ": channel ", channel, " of CUDA tensors; an NCCL communicator ",
             "has one channel, 0 (neighbouring pp ranks have a communicator per kind of pipeline ",
             "message: parallel/comm/peer_channels.h)");
  }

  // True when every tensor is on the CPU (MPI's job); otherwise checks that every one is a
  // contiguous tensor on the world's device, which must be this thread's current device.
  bool on_cpu(const std::string& what, Roles tensors) const {
    bool all_cpu = true;
    for (const auto& [role, t] : tensors) {
      TT_CHECK(t->defined(), what, ": ", role, " is an undefined tensor");
      all_cpu = all_cpu && t->device().is_cpu();
    }
    if (all_cpu) return true;
    const Device device = Device::cuda(world_->device());
    for (const auto& [role, t] : tensors) {
      TT_CHECK(t->device() == device, what, ": ", role, " ", *t, " is on ", t->device(),
               ", but this NCCL communicator moves tensors on ", device,
               " (and hands CPU tensors to MPI); pass every tensor of one call on ", device,
               ", or every one on the CPU");
      TT_CHECK(t->is_contiguous(), what, ": ", role, " ", *t,
               " is a strided view; pass a contiguous tensor (.contiguous())");
    }
    const int current = cuda::current_device();
    TT_CHECK(current == world_->device(), what, ": the NCCL communicator belongs to ", device,
             " but cuda:", current, " is current on this thread; set the device (cuda::set_device(",
             world_->device(), ")) before posting");
    return false;
  }

  // Issues `issue` on this communicator's stream after the current stream's work so far, records
  // the end event and hands the operation to the watchdog. `span_name` and `wait_name` are the
  // profiler spans of the post and of Work::wait(); `payload` is this rank's input, whose bytes
  // the post's span carries with the mesh dims.
  template <class Issue>
  Work post(const char* span_name, const char* wait_name, const Tensor& payload, std::string what,
            std::vector<Tensor> keep, Issue&& issue) {
    auto op = std::make_shared<NcclInFlight>(std::move(what), world_->timeout_s(), std::move(keep));
    world_->watchdog().watch(op);
    try {
      // The stream waits for everything issued so far on the current stream. The event is
      // re-recorded at every post: a stream wait takes the record current at the call.
      ready_.record(cuda::current_stream());
      ready_.wait(stream_);
      {
        // The span's device interval is the collective itself: its events go on the
        // communication stream (made current only after the ordering above, which must see the
        // compute stream as current).
        cuda::StreamGuard on_comm(stream_);
        profiler::Span span(span_name, "comm", name(), static_cast<int64_t>(payload.nbytes()));
        const ncclResult_t result = issue(stream_);
        TT_CHECK(result == ncclSuccess, op->what, ": NCCL error: ", ncclGetErrorString(result),
                 " (", ncclGetLastError(comm_), ")");
      }
      op->done.record(stream_);
    } catch (...) {
      op->state.store(NcclInFlight::Abandoned, std::memory_order_release);
      throw;
    }
    op->state.store(NcclInFlight::Issued, std::memory_order_release);
    return Work(std::make_shared<NcclPending>(std::move(op), wait_name));
  }

  void check_peer(const std::string& what, int peer) const {
    check_rank(what, "peer", peer, *this);
    TT_CHECK(peer != rank(), what, ": NCCL cannot send to or receive from the rank itself (", peer,
             "); copy the tensor instead");
  }

  std::shared_ptr<NcclWorld> world_;
  std::shared_ptr<Communicator> cpu_;
  bool owns_stream_ = false;
  cudaStream_t stream_ = nullptr;
  cuda::Event ready_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::shared_ptr<NcclWorld> create_nccl_world(double timeout_s, const std::string& backend_key) {
  return std::make_shared<NcclWorld>(timeout_s, backend_key);
}

std::shared_ptr<Communicator> split_nccl_communicator(const std::shared_ptr<NcclWorld>& world,
                                                      int color, int key,
                                                      std::shared_ptr<Communicator> cpu) {
  TT_CHECK(world != nullptr && cpu != nullptr, "split_nccl_communicator: null world or cpu");
  TT_CHECK(color >= 0, "split_nccl_communicator(", cpu->name(), "): color must be >= 0, got ",
           color);
  auto comm = std::make_shared<NcclCommunicator>(world, std::move(cpu), /*own_stream=*/false);
  comm->split(color, key);
  return comm;
}

std::shared_ptr<Communicator> split_nccl_peer_channel(const std::shared_ptr<NcclWorld>& world,
                                                      int color, int key, int sender_key,
                                                      std::shared_ptr<Communicator> cpu) {
  TT_CHECK(world != nullptr, "split_nccl_peer_channel: null world");
  if (cpu == nullptr) {
    // In no pair of this split: the split is collective over the world all the same.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t none = nullptr;
    TT_NCCL_CHECK(ncclCommSplit(world->comm(), NCCL_SPLIT_NOCOLOR, key, &none, &config));
    return nullptr;
  }
  TT_CHECK(color >= 0 && cpu->size() == 2 && (sender_key == 0 || sender_key == 1),
           "split_nccl_peer_channel(", cpu->name(), "): a pair (color ", color, ", ", cpu->size(),
           " ranks) with sender 0 or 1, got ", sender_key);
  auto comm = std::make_shared<NcclCommunicator>(world, std::move(cpu), /*own_stream=*/true);
  comm->split(color, key);
  // Connected now, in the mesh's order, not at its first message: NCCL connects a pair on the
  // host when their first transfer is posted, and a rank blocked there on one channel while its
  // peer is blocked on another would hang the job. One element from the sender, as the channel
  // will carry its messages, on the host's time (the watchdog sees it).
  const Tensor one = Tensor::zeros({1}, DType::F32, Device::cuda(world->device()));
  Work connect = comm->rank() == sender_key ? comm->send_async(one, 1 - sender_key, 0)
                                            : comm->recv_async(one, 1 - sender_key, 0);
  connect.wait();
  cuda::synchronize_stream();
  return comm;
}

}  // namespace titan::parallel
