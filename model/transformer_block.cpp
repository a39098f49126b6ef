#include "model/transformer_block.h"

#include <cmath>
#include <string>

#include "core/memory_tag.h"
#include "core/profiler.h"
#include "model/lora.h"
#include "model/ops/attention/attention.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/ops/swiglu.h"
#include "model/ops/tensor_math.h"
#include "model/precision.h"
#include "model/producer_fusion.h"

namespace titan::model {

namespace {

// torchtitan's depth-scaled init for the projections that write into the residual stream.
double residual_init_std(int layer_id) { return 0.02 / std::sqrt(2.0 * (layer_id + 1)); }

// torch.nn.init.trunc_normal_'s default cutoff is ±2 absolute, far outside ±3σ for std 0.02.
InitSpec projection_init(double std) { return InitSpec::truncated_normal(std, 2.0); }

}  // namespace

TransformerBlock::TransformerBlock(int layer_id, const ModelArgs& a, DType dtype)
    : layer_id_(layer_id),
      args_(a),
      prefix_("layers." + std::to_string(layer_id) + "."),
      attention_norm_(own_parameter(
          declare_parameter(prefix_ + "attention_norm.weight", {a.dim}, InitSpec::ones(), dtype))),
      wqkv_weight_(own_parameter(declare_fused_parameter(
          prefix_ + "attention.wqkv.weight",
          {{prefix_ + "attention.wq.weight", a.n_heads * a.head_dim(), projection_init(0.02)},
           {prefix_ + "attention.wk.weight", a.n_kv_heads * a.head_dim(), projection_init(0.02)},
           {prefix_ + "attention.wv.weight", a.n_kv_heads * a.head_dim(), projection_init(0.02)}},
          a.dim, dtype))),
      wo_weight_(own_parameter(
          declare_parameter(prefix_ + "attention.wo.weight", {a.dim, a.n_heads * a.head_dim()},
                            projection_init(residual_init_std(layer_id)), dtype))),
      ffn_norm_(own_parameter(
          declare_parameter(prefix_ + "ffn_norm.weight", {a.dim}, InitSpec::ones(), dtype))),
      w13_weight_(own_parameter(declare_fused_parameter(
          prefix_ + "feed_forward.w13.weight",
          {{prefix_ + "feed_forward.w1.weight", a.ffn_dim, projection_init(0.02)},
           {prefix_ + "feed_forward.w3.weight", a.ffn_dim,
            projection_init(residual_init_std(layer_id))}},
          a.dim, dtype))),
      w2_weight_(
          own_parameter(declare_parameter(prefix_ + "feed_forward.w2.weight", {a.dim, a.ffn_dim},
                                          projection_init(residual_init_std(layer_id)), dtype))),
      wqkv_(prefix_ + "attention.wqkv", wqkv_weight_.get()),
      wo_(prefix_ + "attention.wo", wo_weight_.get()),
      w13_(prefix_ + "feed_forward.w13", w13_weight_.get()),
      w2_(prefix_ + "feed_forward.w2", w2_weight_.get()),
      cp_(std::make_shared<ContextParallelComm>()) {
  const std::pair<const char*, Linear*> adaptable[] = {
      {"wqkv", &wqkv_}, {"wo", &wo_}, {"w13", &w13_}, {"w2", &w2_}};
  for (const auto& [name, linear] : adaptable) {
    if (!a.lora.targets_linear(name)) continue;
    DeclaredAdapter declared = declare_adapter(linear->weight(), a.lora.rank, dtype);
    auto adapter = std::make_shared<LowRankAdapter>();
    adapter_params_.push_back(own_parameter(std::move(declared.a)));
    adapter->a = adapter_params_.back().get();
    adapter_params_.push_back(own_parameter(std::move(declared.b)));
    adapter->b = adapter_params_.back().get();
    adapter->rank = a.lora.rank;
    adapter->scale = a.lora.scale();
    linear->set_adapter(std::move(adapter));
  }
}

std::vector<Parameter*> TransformerBlock::parameters() {
  std::vector<Parameter*> params = {attention_norm_.get(), wqkv_weight_.get(), wo_weight_.get(),
                                    ffn_norm_.get(),       w13_weight_.get(),  w2_weight_.get()};
  for (const std::unique_ptr<Parameter>& p : adapter_params_) params.push_back(p.get());
  return params;
}

ProducedOperands TransformerBlock::forward_all(const Tensor& x, bool produce_w2_input) {
  BlockActivations& s = saved_;
  const int64_t T = x.size(0), D = args_.dim, Dh = args_.head_dim();
  // Local head counts come from the weights, so a tensor-parallel shard needs no special case.
  const int64_t heads = wo_weight_->value.size(1) / Dh;
  const int64_t kv_heads = (wqkv_weight_->value.size(0) / Dh - heads) / 2;
  const AttentionShape shape{batch_.batch, batch_.seq_len, heads, kv_heads, Dh,
                             batch_.attention_backend};

  const DType stats = stats_dtype(x.dtype());
  s.x = x;
  s.attn_rstd = Tensor::empty({T}, stats, x.device());
  s.xn = Tensor::empty({T, D}, x.dtype(), x.device());
  {
    // attention_norm writes wqkv's input as wqkv's GEMM reads it, where that fuses.
    const ProducedOperands xn =
        rmsnorm_forward_for(wqkv_, s.xn, s.attn_rstd, x, attention_norm_->value, args_.norm_eps);
    s.qkv = wqkv_.forward(s.xn, &xn);
  }
  rope_forward(s.qkv, batch_.rope_cos, batch_.rope_sin, batch_.seq_len, heads + kv_heads, Dh);
  s.attn = Tensor::empty({s.qkv.size(0), heads * Dh}, x.dtype(), x.device());
  s.lse = Tensor::empty({batch_.batch, heads, batch_.seq_len}, stats, x.device());
  {
    profiler::Span span("attention.forward", "attention");
    cp_->attention_forward(s.attn, s.lse, s.qkv, shape, batch_.mask);
  }

  s.h = wo_.forward(s.attn);
  s.ffn_rstd = Tensor::empty({T}, stats, x.device());
  s.hn = Tensor::empty({T, D}, x.dtype(), x.device());
  {
    // h = wo(attn) + x (the residual), then ffn_norm(h): one kernel on CUDA, which writes w13's
    // input as w13's GEMM reads it where that fuses.
    const ProducedOperands hn =
        add_rmsnorm_forward_for(w13_, s.hn, s.ffn_rstd, s.h, x, ffn_norm_->value, args_.norm_eps);
    s.h13 = w13_.forward(s.hn, &hn);
  }
  s.g = Tensor::empty({s.h13.size(0), s.h13.size(1) / 2}, x.dtype(), x.device());
  // A recompute needs g for w2's grad-weight GEMM only, which prepares it itself.
  if (produce_w2_input) return swiglu_forward_for(w2_, s.g, s.h13);
  swiglu_forward(s.g, s.h13);
  return {};
}

void TransformerBlock::drop_recomputable() {
  switch (recompute_) {
    case BlockRecompute::None: break;
    case BlockRecompute::Op:
      saved_.xn = {};
      saved_.hn = {};
      saved_.g = {};
      break;
    case BlockRecompute::Full: {
      BlockActivations input_only;
      input_only.x = saved_.x;
      saved_ = input_only;
      break;
    }
  }
}

void TransformerBlock::recompute_dropped() {
  if (recompute_ == BlockRecompute::None) return;
  TT_PROFILE_SPAN("block." + std::to_string(layer_id_) + ".recompute", "model");
  BlockActivations& s = saved_;
  switch (recompute_) {
    case BlockRecompute::None: break;
    case BlockRecompute::Op:
      s.xn = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
      rmsnorm_forward(s.xn, s.attn_rstd, s.x, attention_norm_->value, args_.norm_eps);
      s.hn = Tensor::empty(s.h.shape(), s.h.dtype(), s.h.device());
      rmsnorm_forward(s.hn, s.ffn_rstd, s.h, ffn_norm_->value, args_.norm_eps);
      s.g = Tensor::empty({s.h13.size(0), s.h13.size(1) / 2}, s.h13.dtype(), s.h13.device());
      swiglu_forward(s.g, s.h13);
      break;
    case BlockRecompute::Full: forward_all(s.x, false); break;
  }
}

Tensor TransformerBlock::forward(const Tensor& x, const SequenceBatch& batch) {
  TT_CHECK(x.ndim() == 2 && x.size(1) == args_.dim, "block ", layer_id_, ": input must be [T, ",
           args_.dim, "], got ", x);
  MemoryTagScope tag(MemoryTag::activations(layer_id_));
  batch_ = batch;
  Tensor out;
  {
    const ProducedOperands g = forward_all(x, true);
    out = w2_.forward(saved_.g, &g);
  }
  accumulate(out, saved_.h);
  drop_recomputable();
  return out;
}

Tensor TransformerBlock::backward(const Tensor& dout) {
  TT_CHECK(saved_.x.defined(), "block ", layer_id_, ": backward without a forward");
  // Activation gradients and the recompute are this block's; the parameter gradients they
  // accumulate into were allocated elsewhere, under their own tags.
  MemoryTagScope tag(MemoryTag::activations(layer_id_));
  recompute_dropped();
  BlockActivations& s = saved_;
  const int64_t Dh = args_.head_dim();
  const int64_t heads = s.attn.size(1) / Dh;
  const int64_t kv_heads = (s.qkv.size(1) / Dh - heads) / 2;
  const AttentionShape shape{batch_.batch, batch_.seq_len, heads, kv_heads, Dh,
                             batch_.attention_backend};

  // Feed-forward half: out = h + w2(swiglu(w13(ffn_norm(h)))).
  Tensor dg = w2_.backward(dout, s.g);
  s.g = {};
  Tensor dh13 = Tensor::empty(s.h13.shape(), s.h13.dtype(), s.h13.device());
  Tensor dhn;
  {
    // dSwiGLU writes w13's output gradient as w13's backward GEMMs read it, where that fuses.
    const ProducedOperands dh13_operands = swiglu_backward_for(w13_, dh13, dg, s.h13);
    dg = {};
    s.h13 = {};
    dhn = w13_.backward(dh13, s.hn, &dh13_operands);
  }
  dh13 = {};
  s.hn = {};
  Tensor dh = Tensor::empty(s.h.shape(), s.h.dtype(), s.h.device());
  // Through ffn_norm, plus dout along the residual path; dh is wo's output gradient.
  ProducedOperands dh_operands = rmsnorm_backward_add_for(wo_, dh, gradient_sink(*ffn_norm_), dhn, s.h,
                                                          ffn_norm_->value, s.ffn_rstd, dout);
  dhn = {};
  s.h = {};
  s.ffn_rstd = {};

  // Attention half: h = x + wo(attention(rope(wqkv(attention_norm(x))))).
  Tensor dattn = wo_.backward(dh, s.attn, &dh_operands);
  dh_operands = {};
  Tensor dqkv = Tensor::empty(s.qkv.shape(), s.qkv.dtype(), s.qkv.device());
  {
    profiler::Span span("attention.backward", "attention");
    cp_->attention_backward(dqkv, dattn, s.qkv, s.attn, s.lse, shape, batch_.mask);
  }
  dattn = {};
  s.attn = {};
  s.qkv = {};
  s.lse = {};
  rope_backward(dqkv, batch_.rope_cos, batch_.rope_sin, batch_.seq_len, heads + kv_heads, Dh);
  Tensor dxn = wqkv_.backward(dqkv, s.xn);
  dqkv = {};
  s.xn = {};
  Tensor dx = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
  // Through attention_norm, plus dh along the residual path.
  rmsnorm_backward_add(dx, gradient_sink(*attention_norm_), dxn, s.x, attention_norm_->value,
                       s.attn_rstd, dh);
  saved_ = {};
  return dx;
}

int64_t TransformerBlock::saved_bytes() const {
  int64_t bytes = 0;
  for (const Tensor* t :
       {&saved_.x, &saved_.attn_rstd, &saved_.xn, &saved_.qkv, &saved_.attn, &saved_.lse, &saved_.h,
        &saved_.ffn_rstd, &saved_.hn, &saved_.h13, &saved_.g}) {
    if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  }
  return bytes;
}

}  // namespace titan::model
