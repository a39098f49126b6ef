// How a parameter travels through FSDP's all-gather when it does not travel as its values in the
// compute dtype. FSDP (parallel/fsdp.h) calls a codec for the parameters it was given one, and
// knows nothing of what the codec does; fp8/float8_all_gather.h implements the one codec there
// is, the FP8 linears' weights as e4m3 codes (docs/architecture.md#decision-9, torchao's
// fsdp_pre_all_gather / fsdp_post_all_gather). It lives here, beside the other seams between the
// model and the layers that run it (model_comm.h), because fp8/ sits below parallel/.
//
//   after each optimizer step    update(every coded shard)        one collective for all
//   (or before each gather)      update(the group's coded shards)
//   before the gather            encode(shard) → the send buffer  wire_dtype, one per element
//   after the gather             decode(gathered) → the value the model computes with
//   when FSDP frees the value    release(value)
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/parameter.h"

namespace titan::model {

class ParamGatherCodec {
 public:
  struct Shard {
    const Parameter* param;  // the parameter (its name and its tp slice's shape)
    Tensor values;           // this rank's FSDP shard [R, cols] (zero-padded rows included)
  };

  virtual ~ParamGatherCodec() = default;
  // The dtype of the gather's buffers: one element on the wire per parameter element.
  virtual DType wire_dtype() const = 0;
  // Whatever encoding needs from the whole parameter rather than the shard (FP8: the weight's
  // scale, from every shard's amax), for several parameters in one collective over their shard
  // group: every rank of it calls update with the same parameters in the same order.
  virtual void update(const std::vector<Shard>& shards) = 0;
  // shard [R, cols] → out [R·cols] in wire_dtype(), on the shard's device. Needs an update of
  // this parameter since its values last changed.
  virtual void encode(const Parameter& param, const Tensor& shard, const Tensor& out) = 0;
  // gathered [rows, cols] in wire_dtype() (the parameter's tp slice, every shard's rows) → the
  // value the model computes with, [rows, cols] in `dtype` on the gathered tensor's device.
  virtual Tensor decode(const Parameter& param, const Tensor& gathered, DType dtype) = 0;
  // FSDP is about to drop `value` (a decode result): forget anything kept for it.
  virtual void release(const Parameter& param, const Tensor& value) = 0;
};

}  // namespace titan::model
