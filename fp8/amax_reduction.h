// How a sharded tensor's tensorwise amax becomes the whole tensor's
// (docs/architecture.md#decision-8): a tensorwise scale must be the whole tensor's, or a mesh would
// not train like one rank. fp8/ only declares the seam — it knows nothing of meshes or MPI — and
// parallel/ implements it as a max all-reduce over the group the tensor is split over
// (parallel/amax_reduction.h): the tp group for the FP8 linear's operands, a weight's own shard
// group (dp_shard × tp) for FSDP's float8 all-gather. No reduction (a null pointer) means the
// tensor is whole on this rank.
#pragma once

#include "core/tensor.h"

namespace titan::fp8 {

// What a linear's operand is, for the group its tensorwise amax spans: a weight is split over tp
// only; an activation (x, dy) has its tokens split over cp as well (fp8/float8_linear.h).
enum class OperandKind { Weight, Activation };

class AmaxReduction {
 public:
  virtual ~AmaxReduction() = default;
  // amax: f32 [n] on the tensors' device, one amax per tensor (several tensors' amaxes reduce
  // in one call); replaced in place by the element-wise max over the group. Collective: every
  // rank of the group calls it in the same order.
  virtual void reduce_max(const Tensor& amax) = 0;
};

}  // namespace titan::fp8
