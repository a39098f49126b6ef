// The argument checks every Communicator backend makes before it posts an operation, in one
// wording, so that code which runs on one backend runs on the other: the same dtypes reduce,
// the same buffers may not overlap, the same counts must match.
#pragma once

#include <string>

#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace titan::parallel {

const char* reduce_op_name(ReduceOp op);  // "Sum", "Avg", "Max"

// f32, f64 and bf16 with any op; i32 and i64 with Sum and Max (an integer mean would truncate
// silently). Gathers move any dtype.
bool can_reduce(DType dtype, ReduceOp op);

// Each throws titan::Error starting with `what` ("all_reduce(Sum) on tp") and saying the fix.
void check_reducible(const std::string& what, DType dtype, ReduceOp op);
void check_same_dtype(const std::string& what, const Tensor& out, const Tensor& in);
void check_disjoint(const std::string& what, const Tensor& out, const Tensor& in);
void check_rank(const std::string& what, const char* role, int rank, const Communicator& comm);
void check_channel(const std::string& what, int channel);  // 0 … kPointToPointChannels − 1
// all_gather: out holds comm.size() × in; reduce_scatter: in holds comm.size() × out.
void check_gather_counts(const std::string& what, const Tensor& out, const Tensor& in,
                         const Communicator& comm);
void check_scatter_counts(const std::string& what, const Tensor& out, const Tensor& in,
                          const Communicator& comm);

}  // namespace titan::parallel
