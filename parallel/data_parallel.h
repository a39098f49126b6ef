// How the data-parallel mesh dims hold the parameters and reduce the gradients: the ParamHooks
// the model calls around each parameter group, plus what the trainer needs around a step.
//
//   FullyShardedDataParallel  dp_shard > 1: FSDP, and HSDP when dp_replicate > 1 too (fsdp.h)
//   ReplicatedDataParallel    dp_shard = 1: every dp rank holds the whole (tp-sliced) model,
//                             gradients all-reduced over dp_replicate — DDP (replicated.h)
//
// Both also finish the gradients of tp-replicated parameters (the sequence-parallel norms):
// each tp rank saw only its sequence shard, so their gradients are summed over tp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "model/model_comm.h"
#include "model/parameter.h"

namespace titan::parallel {

// Where the parameters live and what the model computes with: torchtitan's FSDP2 default
// MixedPrecisionPolicy on CUDA (param_dtype bf16 for compute and all-gather, reduce_dtype fp32).
// The persistent parameters — what init writes, the optimizer steps and checkpoints hold — keep
// their declared dtype (fp32 master weights), and so do the gradients, which are reduced in it.
// With compute_dtype equal to it, as on the CPU, the model computes on the parameters directly.
struct ParamPlacement {
  Device device = Device::cpu();
  DType compute_dtype = DType::F32;
};

// Bytes this rank holds for parameters and gradients.
struct ParamMemory {
  int64_t param_bytes = 0;  // kept across steps: shards under FSDP, else everything
                            // (with their compute-dtype copies, when replicated)
  int64_t grad_bytes = 0;   // likewise, for gradients
  // FSDP: the most held at once in gathered parameters, their gradients and the collectives'
  // buffers (prefetch included); 0 when nothing is sharded.
  int64_t peak_unsharded_bytes = 0;
  int64_t gathered_bytes = 0;  // FSDP: bytes received by parameter all-gathers so far
};

class DataParallel : public model::ParamHooks {
 public:
  // Gives every parameter its initial values, each a pure function of (seed, name, index), so
  // every mesh starts from the same model.
  virtual void init_weights(uint64_t seed) = 0;
  // What the optimizer steps and the gradient norm covers: FSDP's shards, or the parameters.
  virtual std::vector<model::Parameter*> optimizer_params() = 0;
  virtual void zero_grad() = 0;
  // After the last micro-batch's backward: every gradient summed over every rank that shares it.
  virtual void finish_gradients() = 0;
  // After the parameters changed: initialised, loaded, or stepped by the optimizer (FSDP
  // recomputes the float8 all-gather's scales here when they are precomputed).
  virtual void on_weights_updated() {}
  virtual ParamMemory memory() const = 0;
  virtual std::string describe() const = 0;
};

}  // namespace titan::parallel
