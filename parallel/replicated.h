// dp_shard = 1: every dp rank holds its whole tensor-parallel slice of the model; gradients
// accumulate over the micro-batches locally and are all-reduced once per step over
// dp_replicate (DDP with no_sync during accumulation), and over tp for the tp-replicated norms.
#pragma once

#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

class ReplicatedDataParallel final : public DataParallel {
 public:
  // Allocates the parameters (their tp slices must be set already).
  ReplicatedDataParallel(std::vector<model::Parameter*> params, const DeviceMesh& mesh);

  void init_weights(uint64_t seed) override;
  std::vector<model::Parameter*> optimizer_params() override { return params_; }
  void zero_grad() override;
  void finish_gradients() override;
  ParamMemory memory() const override;
  std::string describe() const override;

 private:
  std::vector<model::Parameter*> params_;
  DeviceMesh mesh_;
};

}  // namespace titan::parallel
