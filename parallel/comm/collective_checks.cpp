#include "parallel/comm/collective_checks.h"

#include "core/check.h"

namespace titan::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "Sum";
    case ReduceOp::Avg: return "Avg";
    case ReduceOp::Max: return "Max";
  }
  TT_CHECK(false, "unknown ReduceOp ", static_cast<int>(op));
}

bool can_reduce(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::F32:
    case DType::F64:
    case DType::BF16: return true;
    case DType::I32:
    case DType::I64: return op != ReduceOp::Avg;
    default: return false;
  }
}

void check_reducible(const std::string& what, DType dtype, ReduceOp op) {
  TT_CHECK(can_reduce(dtype, op), what, ": does not reduce ", dtype_name(dtype), " with ",
           reduce_op_name(op), "; reductions take f32, f64 or bf16 (or i32/i64 for Sum and Max)",
           " — convert before reducing");
}

void check_same_dtype(const std::string& what, const Tensor& out, const Tensor& in) {
  TT_CHECK(out.dtype() == in.dtype(), what, ": out ", out, " and in ", in,
           " must have the same dtype");
}

void check_disjoint(const std::string& what, const Tensor& out, const Tensor& in) {
  const auto* o = static_cast<const char*>(out.raw_data());
  const auto* i = static_cast<const char*>(in.raw_data());
  const bool overlap =
      out.nbytes() > 0 && in.nbytes() > 0 && o < i + in.nbytes() && i < o + out.nbytes();
  TT_CHECK(!overlap, what, ": out ", out, " and in ", in, " share memory; pass separate buffers");
}

void check_rank(const std::string& what, const char* role, int rank, const Communicator& comm) {
  TT_CHECK(rank >= 0 && rank < comm.size(), what, ": ", role, " ", rank, " is not a rank of ",
           comm.name(), ", which has ranks 0…", comm.size() - 1);
}

void check_channel(const std::string& what, int channel) {
  TT_CHECK(channel >= 0 && channel < kPointToPointChannels, what, ": channel ", channel,
           " is not one of 0…", kPointToPointChannels - 1);
}

void check_gather_counts(const std::string& what, const Tensor& out, const Tensor& in,
                         const Communicator& comm) {
  const int n = comm.size();
  TT_CHECK(out.numel() == n * in.numel(), what, ": out ", out, " has ", out.numel(),
           " elements, but it gathers in ", in, " from ", n, " ranks: ", n, " × ", in.numel(),
           " = ", n * in.numel());
}

void check_scatter_counts(const std::string& what, const Tensor& out, const Tensor& in,
                          const Communicator& comm) {
  const int n = comm.size();
  TT_CHECK(in.numel() == n * out.numel(), what, ": in ", in, " has ", in.numel(),
           " elements, but it scatters into out ", out, " on ", n, " ranks: ", n, " × ",
           out.numel(), " = ", n * out.numel());
}

}  // namespace titan::parallel
