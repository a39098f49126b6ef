#include "parallel/rank_agreement.h"

#include <mpi.h>

#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/check.h"
#include "core/exit_code.h"
#include "parallel/comm/mpi_watchdog.h"
#include "parallel/mpi_runtime.h"

namespace titan::parallel {

namespace {

constexpr int kInternalError = exit_status(ExitCode::Failure);
constexpr int kBadInput = exit_status(ExitCode::BadInput);

// The agreement, over any transport that takes the maximum of an int over the ranks and
// broadcasts bytes from one rank.
template <class Transport>
AgreedStatus agree(Transport& transport, int rank, int status, const std::string& message) {
  AgreedStatus agreed;
  agreed.status = transport.max(status);
  if (agreed.status == 0) return agreed;
  // The lowest rank that had the agreed status: the largest -rank among them.
  agreed.rank = -transport.max(status == agreed.status ? -rank : INT_MIN);
  agreed.message = transport.broadcast(rank == agreed.rank ? message : std::string(), agreed.rank);
  return agreed;
}

// MPI_COMM_WORLD by MPI calls, watched by the MPI watchdog as one operation.
struct WorldTransport {
  int max(int value) {
    int out = 0;
    TT_MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return out;
  }
  std::string broadcast(std::string text, int root) {
    int length = static_cast<int>(text.size());
    TT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, root, MPI_COMM_WORLD));
    text.resize(static_cast<size_t>(length));
    TT_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, root, MPI_COMM_WORLD));
    return text;
  }
};

// A Communicator's collectives on small host tensors.
struct CommunicatorTransport {
  Communicator& comm;

  int max(int value) {
    const Tensor t = Tensor::from_vector<int32_t>({value}, {1});
    comm.all_reduce(t, ReduceOp::Max);
    return t.data<int32_t>()[0];
  }
  std::string broadcast(std::string text, int root) {
    const Tensor length = Tensor::from_vector<int64_t>({static_cast<int64_t>(text.size())}, {1});
    comm.broadcast(length, root);
    const int64_t n = length.data<int64_t>()[0];
    if (n == 0) return {};
    const Tensor bytes = Tensor::empty({n}, DType::U8);
    if (comm.rank() == root) std::memcpy(bytes.raw_data(), text.data(), text.size());
    comm.broadcast(bytes, root);
    return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(n));
  }
};

}  // namespace

RankResult attempt(const std::function<void()>& work) {
  RankResult result;
  try {
    work();
  } catch (const InputError& e) {
    result = {kBadInput, e.what(), std::current_exception()};
  } catch (const std::exception& e) {
    result = {kInternalError, e.what(), std::current_exception()};
  }
  return result;
}

AgreedStatus agree_on_status(int status, const std::string& message) {
  int world_rank = 0;
  TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  WatchedMpiCall watched("agree_on_status (set-up)", sizeof status);
  WorldTransport transport;
  return agree(transport, world_rank, status, message);
}

AgreedStatus agree_on_status(Communicator& comm, int status, const std::string& message) {
  if (comm.size() == 1) return {status, status == 0 ? -1 : 0, status == 0 ? "" : message};
  CommunicatorTransport transport{comm};
  return agree(transport, comm.rank(), status, message);
}

void run_agreed(Communicator& comm, const std::function<void()>& work) {
  const RankResult result = attempt(work);
  const AgreedStatus agreed = agree_on_status(comm, result.status, result.message);
  if (result.error) std::rethrow_exception(result.error);
  if (agreed.status == kBadInput) throw InputError(agreed.message);
  if (agreed.status != 0) throw std::runtime_error(agreed.message);
}

}  // namespace titan::parallel
