// parallel/'s side of fp8/amax_reduction.h: a tensorwise amax made the whole tensor's by a max
// all-reduce over the communicator of the group the tensor is split over — the tp group for the
// FP8 linears' operands, a weight's shard group (dp_shard × tp) for FSDP's float8 all-gather.
#pragma once

#include <memory>

#include "fp8/amax_reduction.h"
#include "parallel/comm/communicator.h"

namespace titan::parallel {

class CommAmaxReduction final : public fp8::AmaxReduction {
 public:
  explicit CommAmaxReduction(std::shared_ptr<Communicator> group) : group_(std::move(group)) {}
  void reduce_max(const Tensor& amax) override { group_->all_reduce(amax, ReduceOp::Max); }

 private:
  std::shared_ptr<Communicator> group_;
};

}  // namespace titan::parallel
