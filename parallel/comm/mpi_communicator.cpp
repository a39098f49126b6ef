#include "parallel/comm/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "parallel/comm/collective_checks.h"
#include "parallel/comm/collective_recorder.h"
#include "parallel/comm/mpi_watchdog.h"
#include "parallel/comm/mpi_failure.h"

namespace titan::parallel {
namespace {

// Point-to-point messages need no tag of their own: within one communicator MPI matches a
// send to the receive of the same peer and tag in post order (messages do not overtake), which
// is the interface's promise. Each channel is a tag; collectives never match point-to-point
// traffic, whatever its tag.
constexpr int kPointToPointTag = 0x7174;

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// An MPI type of the element's size, so that any dtype moves as whole elements (and counts are
// element counts everywhere). Only the first four are numbers to MPI: bf16 is reduced in f32
// host copies (reduction_input).
MPI_Datatype element_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16: return MPI_UINT16_T;  // bits, not numbers: MPI has no bf16
    case DType::E4M3:
    case DType::E5M2:
    case DType::U8: return MPI_UINT8_T;
  }
  TT_CHECK(false, "unknown dtype ", static_cast<int>(dtype));
}

// Avg is MPI's sum divided by the group size once the sum has arrived.
void divide_in_place(const Tensor& t, int divisor) {
  auto divide = [&](auto* p) {
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= divisor;
  };
  if (t.dtype() == DType::F32) {
    divide(t.data<float>());
  } else {
    divide(t.data<double>());
  }
}

// CUDA tensors go through MPI as host copies (MPI reads and writes host memory only). An input
// is copied on the current stream, which is synchronised first: the caller produced its values
// there and may not have waited. An output is a host buffer that is copied into the caller's
// tensor once the operation completes (on the stream current at wait()/done(), then
// synchronised, so every stream sees it). This is slow — a round trip through host memory per
// call — but it is what lets several ranks share one GPU (NCCL refuses two ranks on one
// device), and it keeps one backend able to run any tensor.
Tensor host_input(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }
Tensor host_output(const Tensor& t) {
  return t.device().is_cpu() ? t : Tensor::empty(t.shape(), t.dtype());
}

// What runs when an operation completes: Avg divides the host result by the group size, then a
// staged result goes back to the caller's CUDA tensor. Empty when there is nothing to do.
std::function<void()> finish_output(const Tensor& host, const Tensor& caller, bool average,
                                    int group_size) {
  const bool copy_back = !caller.device().is_cpu() || host.dtype() != caller.dtype();
  if (!average && !copy_back) return {};
  return [host, caller, average, copy_back, group_size] {
    if (average) divide_in_place(host, group_size);
    if (!copy_back) return;
    caller.copy_from(host.dtype() == caller.dtype() ? host : cast(host, caller.dtype()));
  };
}

// MPI has no bf16 arithmetic: bf16 is reduced in f32 host copies and rounded once on the way
// back (what NCCL's bf16 reductions cannot offer), the tensor parallel activations' case.
Tensor reduction_input(const Tensor& t) {
  return t.dtype() == DType::BF16 ? cast(host_input(t), DType::F32) : host_input(t);
}
Tensor reduction_output(const Tensor& t) {
  return t.dtype() == DType::BF16 ? Tensor::empty(t.shape(), DType::F32) : host_output(t);
}

// One posted MPI request. It holds copies of the tensor handles, so their storage outlives the
// caller's references, until MPI has finished with it. `wait_name` is the profiler span of a
// wait ("all_gather.wait"): where the host sits until the collective completes. `record` is
// the operation's entry in the flight recorder, in flight until the request completes (the
// MPI watchdog times it out).
class MpiPending final : public Work::Pending {
 public:
  MpiPending(const char* wait_name, std::string what, uint64_t record, std::vector<Tensor> keep,
             std::function<void()> on_done = {})
      : wait_name_(wait_name),
        what_(std::move(what)),
        record_(record),
        keep_(std::move(keep)),
        on_done_(std::move(on_done)) {}
  MpiPending(const MpiPending&) = delete;
  MpiPending& operator=(const MpiPending&) = delete;

  // A non-blocking collective cannot be cancelled or freed (MPI-3.1 §5.12), and MPI may still be
  // writing into the tensors held here: dropping an unfinished Work therefore completes it.
  ~MpiPending() override {
    // A null request was never posted (the post itself failed): nothing to finish.
    if (!done_ && request_ != MPI_REQUEST_NULL && !mpi_finalized()) {
      CollectiveRecorder::instance().begin_wait(record_);
      if (MPI_Wait(&request_, MPI_STATUS_IGNORE) == MPI_SUCCESS && on_done_) on_done_();
    }
    if (!done_) CollectiveRecorder::instance().complete(record_);
  }

  MPI_Request* request() { return &request_; }

  void wait() override {
    if (done_) return;
    profiler::Span span(wait_name_, "comm");
    CollectiveRecorder::instance().begin_wait(record_);  // from here, the watchdog's clock runs
    finish(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    const int code = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS || flag) finish(code, "MPI_Test");
    return done_;
  }

 private:
  void finish(int code, const char* call) {
    done_ = true;  // also on failure: the request is not waited on twice
    CollectiveRecorder::instance().complete(record_);
    keep_.clear();
    mpi_check(code, detail::concat(call, " for ", what_).c_str(), __FILE__, __LINE__);
    MemoryTagScope staging(MemoryCategory::CommBuffers);  // a bf16 result's cast back
    if (on_done_) on_done_();
  }

  const char* wait_name_;
  std::string what_;  // "all_reduce(Sum) on tp", for errors
  uint64_t record_;
  std::vector<Tensor> keep_;
  std::function<void()> on_done_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm`.
  MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
    TT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    TT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    TT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    world_ranks_ = world_ranks_of(comm_, size_);
    record_comm_ = CollectiveRecorder::instance().add_comm({name_, world_ranks_});
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const std::string& name() const override { return name_; }

  Work all_gather_async(const Tensor& out, const Tensor& in) override {
    const std::string what = "all_gather on " + name_;
    profiler::Span span("all_gather", "comm", name_, static_cast<int64_t>(in.nbytes()));
    // Host copies of CUDA tensors, f32 copies of bf16 ones: this call's staging.
    MemoryTagScope staging(MemoryCategory::CommBuffers);
    check_buffer(what, "out", out);
    check_buffer(what, "in", in);
    check_same_dtype(what, out, in);
    check_gather_counts(what, out, in, *this);
    check_disjoint(what, out, in);
    const int n = mpi_count(what, in.numel());
    const MPI_Datatype type = element_type(in.dtype());
    const Tensor host_in = host_input(in), host_out = host_output(out);
    auto pending = std::make_shared<MpiPending>(
        "all_gather.wait", what,
        record_collective(detail::concat("all_gather of ", count_of(in), " per rank"), in),
        std::vector<Tensor>{host_out, host_in}, finish_output(host_out, out, false, size_));
    TT_MPI_CHECK(MPI_Iallgather(host_in.raw_data(), n, type, host_out.raw_data(), n, type, comm_,
                                pending->request()));
    return Work(pending);
  }

  Work reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) override {
    const std::string what = detail::concat("reduce_scatter(", reduce_op_name(op), ") on ", name_);
    profiler::Span span("reduce_scatter", "comm", name_, static_cast<int64_t>(in.nbytes()));
    MemoryTagScope staging(MemoryCategory::CommBuffers);
    check_buffer(what, "out", out);
    check_buffer(what, "in", in);
    check_same_dtype(what, out, in);
    check_reducible(what, in.dtype(), op);
    check_scatter_counts(what, out, in, *this);
    check_disjoint(what, out, in);
    const int n = mpi_count(what, out.numel());
    const Tensor host_in = reduction_input(in), host_out = reduction_output(out);
    auto pending = std::make_shared<MpiPending>(
        "reduce_scatter.wait", what,
        record_collective(detail::concat("reduce_scatter(", reduce_op_name(op), ") of ",
                                         count_of(out), " per rank"),
                          in),
        std::vector<Tensor>{host_out, host_in},
        finish_output(host_out, out, op == ReduceOp::Avg, size_));
    TT_MPI_CHECK(MPI_Ireduce_scatter_block(host_in.raw_data(), host_out.raw_data(), n,
                                           element_type(host_in.dtype()), mpi_op(op), comm_,
                                           pending->request()));
    return Work(pending);
  }

  Work all_reduce_async(const Tensor& t, ReduceOp op) override {
    const std::string what = detail::concat("all_reduce(", reduce_op_name(op), ") on ", name_);
    profiler::Span span("all_reduce", "comm", name_, static_cast<int64_t>(t.nbytes()));
    MemoryTagScope staging(MemoryCategory::CommBuffers);
    check_buffer(what, "t", t);
    check_reducible(what, t.dtype(), op);
    const int n = mpi_count(what, t.numel());
    const Tensor host = reduction_input(t);
    auto pending = std::make_shared<MpiPending>(
        "all_reduce.wait", what,
        record_collective(detail::concat("all_reduce(", reduce_op_name(op), ") of ", count_of(t)),
                          t),
        std::vector<Tensor>{host}, finish_output(host, t, op == ReduceOp::Avg, size_));
    TT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, host.raw_data(), n, element_type(host.dtype()),
                                mpi_op(op), comm_, pending->request()));
    return Work(pending);
  }

  Work broadcast_async(const Tensor& t, int root) override {
    const std::string what = detail::concat("broadcast from ", root, " on ", name_);
    profiler::Span span("broadcast", "comm", name_, static_cast<int64_t>(t.nbytes()));
    MemoryTagScope staging(MemoryCategory::CommBuffers);
    check_buffer(what, "t", t);
    check_rank(what, "root", root, *this);
    const int n = mpi_count(what, t.numel());
    // The root's tensor is only read; every other rank's is only written.
    const bool is_root = root == rank_;
    const Tensor host = is_root ? host_input(t) : host_output(t);
    auto pending = std::make_shared<MpiPending>(
        "broadcast.wait", what,
        record_collective(detail::concat("broadcast of ", count_of(t), " from ", root), t),
        std::vector<Tensor>{host},
        is_root ? std::function<void()>{} : finish_output(host, t, false, size_));
    TT_MPI_CHECK(
        MPI_Ibcast(host.raw_data(), n, element_type(t.dtype()), root, comm_, pending->request()));
    return Work(pending);
  }

  Work send_async(const Tensor& t, int peer, int channel) override {
    const std::string what = detail::concat("send to ", peer, " on ", name_);
    check_channel(what, channel);
    profiler::Span span("send", "comm", name_, static_cast<int64_t>(t.nbytes()));
    MemoryTagScope staging(MemoryCategory::CommBuffers);
    check_buffer(what, "t", t);
    check_rank(what, "peer", peer, *this);
    const int n = mpi_count(what, t.numel());
    const Tensor host = host_input(t);
    auto pending = std::make_shared<MpiPending>(
        "send.wait", what,
        record_point_to_point(
            detail::concat("send of ", count_of(t), " to world rank ", world_ranks_[peer]), t,
            peer),
        std::vector<Tensor>{host});
    TT_MPI_CHECK(MPI_Isend(host.raw_data(), n, element_type(t.dtype()), peer,
                           kPointToPointTag + channel, comm_, pending->request()));
    return Work(pending);
  }

  Work recv_async(const Tensor& t, int peer, int channel) override {
    const std::string what = detail::concat("recv from ", peer, " on ", name_);
    check_channel(what, channel);
    profiler::Span span("recv", "comm", name_, static_cast<int64_t>(t.nbytes()));
    MemoryTagScope staging(MemoryCategory::CommBuffers);
    check_buffer(what, "t", t);
    check_rank(what, "peer", peer, *this);
    const int n = mpi_count(what, t.numel());
    const Tensor host = host_output(t);
    auto pending = std::make_shared<MpiPending>(
        "recv.wait", what,
        record_point_to_point(
            detail::concat("recv of ", count_of(t), " from world rank ", world_ranks_[peer]), t,
            peer),
        std::vector<Tensor>{host}, finish_output(host, t, false, size_));
    TT_MPI_CHECK(MPI_Irecv(host.raw_data(), n, element_type(t.dtype()), peer,
                           kPointToPointTag + channel, comm_, pending->request()));
    return Work(pending);
  }

  Work barrier_async() override {
    profiler::Span span("barrier", "comm", name_, 0);
    auto pending = std::make_shared<MpiPending>(
        "barrier.wait", "barrier on " + name_,
        CollectiveRecorder::instance().post_collective(record_comm_, "barrier", 0, comm_timeout()),
        std::vector<Tensor>{});
    TT_MPI_CHECK(MPI_Ibarrier(comm_, pending->request()));
    return Work(pending);
  }

 private:
  static MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

  // The group's members as world ranks, for the flight recorder and the watchdog's questions.
  static std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    TT_MPI_CHECK(MPI_Comm_group(comm, &group));
    TT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> ranks(static_cast<size_t>(size)), world_ranks(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) ranks[r] = r;
    TT_MPI_CHECK(MPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data()));
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return world_ranks;
  }

  // "2 f32": a tensor's element count and dtype, as the recorder names an operation's size
  // (every rank of a collective must give the same).
  static std::string count_of(const Tensor& t) {
    return detail::concat(t.numel(), " ", dtype_name(t.dtype()));
  }

  // Records the operation about to be posted; the MpiPending built with the id completes it.
  uint64_t record_collective(std::string op, const Tensor& in) const {
    return CollectiveRecorder::instance().post_collective(
        record_comm_, std::move(op), static_cast<int64_t>(in.nbytes()), comm_timeout());
  }
  uint64_t record_point_to_point(std::string op, const Tensor& t, int peer) const {
    return CollectiveRecorder::instance().post_point_to_point(record_comm_, std::move(op),
                                                              static_cast<int64_t>(t.nbytes()),
                                                              world_ranks_[peer], comm_timeout());
  }

  // MPI reads and writes one flat array (a CUDA tensor's host copy).
  static void check_buffer(const std::string& what, const char* role, const Tensor& t) {
    TT_CHECK(t.defined(), what, ": ", role, " is an undefined tensor");
    TT_CHECK(t.is_contiguous(), what, ": ", role, " ", t,
             " is a strided view; pass a contiguous tensor (.contiguous())");
  }

  static int mpi_count(const std::string& what, int64_t elements) {
    TT_CHECK(elements <= INT_MAX, what, ": ", elements, " elements per rank is more than MPI's ",
             "int count holds (", INT_MAX, "); split the transfer into smaller pieces");
    return static_cast<int>(elements);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  int size_ = 0;
  int rank_ = 0;
  std::vector<int> world_ranks_;  // group rank g is world rank world_ranks_[g]
  int record_comm_ = -1;          // this communicator's id in the flight recorder
};

}  // namespace

std::shared_ptr<Communicator> split_world_communicator(int color, int key, std::string name) {
  TT_CHECK(color >= 0 || color == kNoGroup, "split_world_communicator(", name,
           "): color must be >= 0 (or kNoGroup), got ", color);
  MPI_Comm comm = MPI_COMM_NULL;
  {
    WatchedMpiCall watched("MPI_Comm_split for " + name);
    TT_MPI_CHECK(
        MPI_Comm_split(MPI_COMM_WORLD, color == kNoGroup ? MPI_UNDEFINED : color, key, &comm));
  }
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiCommunicator>(comm, std::move(name));
}

}  // namespace titan::parallel
