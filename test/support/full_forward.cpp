#include "support/full_forward.h"

#include "core/cast.h"
#include "model/ops/embedding.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/precision.h"
#include "model/transformer_block.h"

namespace titan::testing {

Tensor full_forward_logits(model::Transformer& model, const Tensor& tokens) {
  const model::ModelArgs& args = model.args();
  const int64_t B = tokens.size(0), S = tokens.size(1), T = B * S;
  const std::vector<model::ParamGroup> groups = model.param_groups();
  const model::Parameter& embeddings = *groups.front().params[0];
  const model::Parameter& norm = *groups.back().params[0];
  const Device device = embeddings.value.device();
  const DType act = embeddings.value.dtype(), stats = model::stats_dtype(act);

  // Transformer::sequence_batch's tables: built on the host, moved to the device.
  model::SequenceBatch batch{B, S, Tensor::empty({S, args.head_dim() / 2}, stats),
                             Tensor::empty({S, args.head_dim() / 2}, stats), {}};
  model::rope_tables(batch.rope_cos, batch.rope_sin, args.head_dim(), args.rope_theta,
                     args.rope_scaling);
  batch.rope_cos = batch.rope_cos.to(device);
  batch.rope_sin = batch.rope_sin.to(device);

  Tensor x = Tensor::empty({T, args.dim}, act, device);
  model::embedding_forward(x, embeddings.value, tokens.contiguous().view({T}).to(device));
  for (model::TransformerBlock& block : model.layers()) {
    x = block.forward(x, batch);
    block.release_activations();
  }
  Tensor xn = Tensor::empty(x.shape(), act, device);
  Tensor rstd = Tensor::empty({T}, stats, device);
  model::rmsnorm_forward(xn, rstd, x, norm.value, args.norm_eps);
  Tensor logits = model.linears().back()->forward(xn).to(Device::cpu());
  return logits.dtype() == DType::F32 ? logits : cast(logits, DType::F32);
}

}  // namespace titan::testing
