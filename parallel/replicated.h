// dp_shard = 1: every dp rank holds its whole tensor-parallel slice of the model; gradients
// accumulate over the micro-batches locally and are all-reduced once per step over
// dp_replicate (DDP with no_sync during accumulation), and over tp for the tp-replicated norms.
//
// Mixed precision (ParamPlacement with a compute dtype other than the parameters'): the fp32
// values live in master copies the optimizer steps, and the model's parameters hold their
// compute-dtype casts, refreshed by on_weights_updated(). The gradients stay fp32, shared by a
// parameter and its master.
#pragma once

#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"

namespace titan::parallel {

class ReplicatedDataParallel final : public DataParallel {
 public:
  // Allocates the parameters (their tp slices must be set already).
  ReplicatedDataParallel(std::vector<model::Parameter*> params, const DeviceMesh& mesh,
                         ParamPlacement placement = {});

  void init_weights(uint64_t seed) override;
  std::vector<model::Parameter*> optimizer_params() override;
  void zero_grad() override;
  void finish_gradients() override;
  void on_weights_updated() override;
  ParamMemory memory() const override;
  std::string describe() const override;

 private:
  std::vector<model::Parameter*> params_;
  std::vector<model::Parameter> masters_;  // fp32 values, when the model computes in bf16
  DeviceMesh mesh_;
};

}  // namespace titan::parallel
