#include "fp8/float8_all_gather.h"

#include "core/cast.h"
#include "core/check.h"
#include "core/memory_tag.h"
#include "core/profiler.h"

namespace titan::fp8 {

namespace {

// A shard as the quantize functions take it: one row of all its elements (a tensorwise scale
// does not care about the shape).
Tensor as_row(const Tensor& t) { return t.contiguous().view({1, t.numel()}); }

}  // namespace

Float8AllGatherCodec::Float8AllGatherCodec(std::shared_ptr<AmaxReduction> shard_amax,
                                           std::shared_ptr<Float8WeightCache> cache)
    : shard_amax_(std::move(shard_amax)), cache_(std::move(cache)) {
  TT_CHECK(cache_ != nullptr, "Float8AllGatherCodec: needs the FP8 linears' weight cache");
}

void Float8AllGatherCodec::update(const std::vector<Shard>& shards) {
  if (shards.empty()) return;
  profiler::Span span("fsdp.float8_scales", "fsdp");
  MemoryTagScope tag(MemoryCategory::Fp8Cache);
  const Device device = shards.front().values.device();
  // One amax per weight, packed so that every weight's reduction is one collective.
  Tensor amax = Tensor::empty({static_cast<int64_t>(shards.size())}, DType::F32, device);
  for (size_t i = 0; i < shards.size(); ++i) {
    TT_CHECK(shards[i].values.device() == device, "FSDP float8 all-gather: shard of ",
             shards[i].param->name, " on ", shards[i].values.device(), ", the others on ", device);
    amax.narrow(0, static_cast<int64_t>(i), 1)
        .copy_from(compute_amax(as_row(shards[i].values), Granularity::Tensorwise));
  }
  if (shard_amax_) shard_amax_->reduce_max(amax);
  const Tensor scales = scales_from_amax(amax, Format::E4M3, /*power_of_two=*/false);
  for (size_t i = 0; i < shards.size(); ++i) {
    scales_[shards[i].param] = scales.narrow(0, static_cast<int64_t>(i), 1).clone();
  }
}

Tensor Float8AllGatherCodec::scale(const model::Parameter& param) const {
  auto it = scales_.find(&param);
  return it == scales_.end() ? Tensor() : it->second;
}

void Float8AllGatherCodec::encode(const model::Parameter& param, const Tensor& shard,
                                  const Tensor& out) {
  const Tensor s = scale(param);
  TT_CHECK(s.defined(), "FSDP float8 all-gather of ", param.name,
           ": no scale (on_weights_updated was not called after the weights changed)");
  TT_CHECK(out.dtype() == DType::E4M3 && out.numel() == shard.numel(), "FSDP float8 all-gather of ",
           param.name, ": send buffer ", out, " for shard ", shard);
  const Float8Tensor q =
      quantize_with_scales(as_row(shard), s, Granularity::Tensorwise, Format::E4M3);
  out.copy_from(q.codes.view({shard.numel()}));
}

Tensor Float8AllGatherCodec::decode(const model::Parameter& param, const Tensor& gathered,
                                    DType dtype) {
  const Tensor s = scale(param);
  TT_CHECK(s.defined() && gathered.ndim() == 2 && gathered.dtype() == DType::E4M3,
           "FSDP float8 all-gather of ", param.name, ": cannot decode ", gathered);
  // The linear computes from the codes; the parameter gets the values they stand for.
  Float8Tensor weight;
  weight.codes = gathered;
  weight.scales = s;
  weight.granularity = Granularity::Tensorwise;
  weight.format = Format::E4M3;
  Tensor value;
  {
    MemoryTagScope tag(MemoryCategory::GatheredParameters);
    value = dequantize(weight);
    if (value.dtype() != dtype) value = cast(value, dtype);
  }
  cache_->put(value, std::move(weight));
  return value;
}

void Float8AllGatherCodec::release(const model::Parameter&, const Tensor& value) {
  cache_->erase(value);
}

}  // namespace titan::fp8
