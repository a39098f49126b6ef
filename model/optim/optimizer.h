// What the trainer, the train step and checkpoints need of an optimizer, whichever it is
// (optimizer.name): AdamW (adamw_optimizer.h), or Muon with AdamW beside it (muon_optimizer.h).
//
// An optimizer steps a list of parameters — this rank's FSDP shards, or its tensor-parallel
// slices — and keeps, for each, a few state tensors of the parameter's local shape. A checkpoint
// stores each state tensor as the parameter's name plus the state's suffix
// ("layers.0.attention.wo.weight.exp_avg"), sharded as the parameter is, so any mesh resumes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/parameter.h"

namespace titan::model {

// One state tensor of one parameter: ".exp_avg", ".exp_avg_sq", ".momentum_buffer".
struct OptimizerState {
  const char* suffix;
  Tensor tensor;  // the parameter's local shape; f32 (f64 in gradient checks) or bf16
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // The name optimizer.name takes and a checkpoint records: "AdamW", "Muon".
  virtual const char* name() const = 0;
  // One update with the scheduled learning rate `lr`; steps are counted from 1.
  virtual void step(double lr) = 0;
  virtual const std::vector<Parameter*>& params() const = 0;
  // What it keeps for params()[i], in a fixed order.
  virtual std::vector<OptimizerState> state_of(size_t i) = 0;
  // Bytes of state this rank holds.
  virtual int64_t state_bytes() const = 0;

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }

 protected:
  int64_t step_ = 0;
};

}  // namespace titan::model
