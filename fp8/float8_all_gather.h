// FSDP's float8 all-gather (docs/architecture.md#decision-9; torchao's WeightWithDynamicFloat8Cast
// tensor): the weights of the FP8 linears travel through FSDP's all-gather as e4m3 codes, a
// quarter of f32's bytes and half of bf16's, and the FP8 linear computes from the gathered codes
// instead of quantizing the weight again.
//
// Tensorwise only: every rank encodes its shard with the scale of the whole weight, so the
// gathered codes are exactly what quantizing the gathered weight would give. The scale comes
// from the amaxes of all the weight's shards — a max all-reduce over its own shard group
// (dp_shard × tp: its FSDP shards and tp slices, never the replicas), which parallel/ supplies
// as an AmaxReduction. update() takes several weights at once, so with
// precompute_float8_dynamic_scale_for_fsdp the scales of every weight cost one all-reduce after
// each optimizer step.
//
// One code path on both devices: the amax, the scales, the codes and the values decoded from
// them come from fp8/float8_tensor.h, which runs fp8/cuda/quantize.cu's kernels for CUDA
// tensors. On CUDA the scales stay on the device (no host synchronisation).
#pragma once

#include <memory>
#include <unordered_map>

#include "fp8/amax_reduction.h"
#include "fp8/float8_linear.h"
#include "model/param_gather_codec.h"

namespace titan::fp8 {

class Float8AllGatherCodec final : public model::ParamGatherCodec {
 public:
  // shard_amax: the max all-reduce over the weights' shard group (null when each weight is
  //             whole on this rank). cache: where each decoded weight's codes go, for the
  //             Float8Gemms that compute with it.
  Float8AllGatherCodec(std::shared_ptr<AmaxReduction> shard_amax,
                       std::shared_ptr<Float8WeightCache> cache);

  DType wire_dtype() const override { return DType::E4M3; }
  void update(const std::vector<Shard>& shards) override;
  void encode(const model::Parameter& param, const Tensor& shard, const Tensor& out) override;
  Tensor decode(const model::Parameter& param, const Tensor& gathered, DType dtype) override;
  void release(const model::Parameter& param, const Tensor& value) override;

  // The whole weight's scale (f32 [1] on the shard's device), or an undefined tensor before the
  // first update of `param`.
  Tensor scale(const model::Parameter& param) const;

 private:
  std::shared_ptr<AmaxReduction> shard_amax_;
  std::shared_ptr<Float8WeightCache> cache_;
  std::unordered_map<const model::Parameter*, Tensor> scales_;
};

}  // namespace titan::fp8
