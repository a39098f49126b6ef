#include "model/transformer.h"

#include <cmath>
#include <optional>

#include "core/dispatch.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "model/ops/cross_entropy.h"
#include "model/ops/embedding.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/precision.h"

namespace titan::model {

namespace {

std::unique_ptr<Parameter> own(Parameter p) { return std::make_unique<Parameter>(std::move(p)); }

// Runs before any member is built, so bad dims never reach an allocation. A program that reads
// its dims from a user validates them first under its own names (titan_train: "model"); here
// they are the struct's.
const ModelArgs& validated(const ModelArgs& args) {
  validate_model_args(args, "ModelArgs");
  return args;
}

}  // namespace

Transformer::Transformer(const ModelArgs& args, DType dtype)
    : args_(validated(args)),
      dtype_(dtype),
      // nn.init.normal_ (std 1) for the embedding; trunc-normal at 3σ with std D^-1/2 for the
      // output projection: torchtitan's init_weights.
      tok_embeddings_(own(declare_parameter("tok_embeddings.weight", {args.vocab_size, args.dim},
                                            InitSpec::normal(1.0), dtype))),
      norm_(own(declare_parameter("norm.weight", {args.dim}, InitSpec::ones(), dtype))),
      output_weight_(own(declare_parameter(
          "output.weight", {args.vocab_size, args.dim},
          InitSpec::truncated_normal(std::pow(args.dim, -0.5), 3.0 * std::pow(args.dim, -0.5)),
          dtype))),
      output_("output", output_weight_.get()),
      tp_(std::make_shared<TensorParallelComm>()),
      hooks_(std::make_shared<ParamHooks>()) {
  layers_.reserve(args.n_layers);
  for (int i = 0; i < args.n_layers; ++i) layers_.emplace_back(i, args, dtype);
}

void Transformer::allocate(Device device) {
  for (Parameter* p : parameters()) {
    if (!p->allocated()) allocate_parameter(*p, device);
  }
}

void Transformer::init_weights(uint64_t seed) {
  for (Parameter* p : parameters()) init_parameter(*p, seed);
}

std::vector<ParamGroup> Transformer::param_groups() {
  std::vector<ParamGroup> groups;
  groups.push_back({"tok_embeddings", {tok_embeddings_.get()}});
  for (TransformerBlock& block : layers_) {
    groups.push_back({"layers." + std::to_string(block.layer_id()), block.parameters()});
  }
  groups.push_back({"head", {norm_.get(), output_weight_.get()}});
  return groups;
}

std::vector<Parameter*> Transformer::parameters() {
  std::vector<Parameter*> all;
  for (const ParamGroup& group : param_groups()) {
    all.insert(all.end(), group.params.begin(), group.params.end());
  }
  return all;
}

std::vector<Linear*> Transformer::linears() {
  std::vector<Linear*> all;
  for (TransformerBlock& block : layers_) {
    for (Linear* linear : block.linears()) all.push_back(linear);
  }
  all.push_back(&output_);
  return all;
}

void Transformer::set_activation_checkpoint(const ActivationCheckpointPolicy& policy) {
  for (TransformerBlock& block : layers_) block.set_recompute(policy.for_block(block.layer_id()));
}

void Transformer::set_tensor_parallel(std::shared_ptr<TensorParallelComm> comm) {
  TT_CHECK(comm != nullptr, "set_tensor_parallel: null communicator");
  tp_ = std::move(comm);
}

void Transformer::set_param_hooks(std::shared_ptr<ParamHooks> hooks) {
  TT_CHECK(hooks != nullptr, "set_param_hooks: null hooks");
  hooks_ = std::move(hooks);
}

void Transformer::zero_grad() {
  for (Parameter* p : parameters()) {
    if (p->grad.defined()) p->grad.zero_();  // FSDP gives a gradient storage only in backward
  }
}

const SequenceBatch& Transformer::sequence_batch(int64_t batch, int64_t seq_len, DType activations,
                                                 Device device) {
  // The tables are built on the CPU and moved: in the activations' dtype there, fp32 on CUDA.
  const DType table_dtype = stats_dtype(activations);
  if (batch_.seq_len != seq_len || batch_.rope_cos.dtype() != table_dtype ||
      batch_.rope_cos.device() != device) {
    int64_t half = args_.head_dim() / 2;
    Tensor cos = Tensor::empty({seq_len, half}, table_dtype);
    Tensor sin = Tensor::empty({seq_len, half}, table_dtype);
    rope_tables(cos, sin, args_.head_dim(), args_.rope_theta, args_.rope_scaling);
    batch_.rope_cos = cos.to(device);
    batch_.rope_sin = sin.to(device);
  }
  batch_.batch = batch;
  batch_.seq_len = seq_len;
  return batch_;
}

double Transformer::forward(const Tensor& tokens, const Tensor& targets, double grad_scale) {
  return run_forward(tokens, targets, grad_scale, /*keep_for_backward=*/true);
}

double Transformer::evaluate(const Tensor& tokens, const Tensor& targets) {
  // A gradient scale of 0: the loss kernel still writes its (zero) gradient over the logits in
  // place, which costs nothing extra and keeps one loss path for training and validation.
  const double loss = run_forward(tokens, targets, 0.0, /*keep_for_backward=*/false);
  release_activations();
  return loss;
}

void Transformer::release_activations() {
  for (TransformerBlock& block : layers_) block.release_activations();
  tokens_ = {};
  final_x_ = {};
  final_xn_ = {};
  final_rstd_ = {};
  dlogits_ = {};
}

double Transformer::run_forward(const Tensor& tokens, const Tensor& targets, double grad_scale,
                                bool keep_for_backward) {
  TT_CHECK(tokens.ndim() == 2 && targets.shape() == tokens.shape(),
           "forward: tokens and targets must both be [B, S], got ", tokens, " and ", targets);
  const int64_t B = tokens.size(0), S = tokens.size(1), T = B * S, D = args_.dim;
  const int groups = args_.n_layers + 2;
  profiler::Span forward_span(keep_for_backward ? "forward" : "evaluate", "model");
  // What forward makes outside the blocks (embedding, final norm, logits, loss); each block
  // tags its own (transformer_block.cpp), and FSDP's gathers tag theirs.
  MemoryTagScope outside_blocks(MemoryTag::activations(-1));

  std::optional<profiler::Span> embedding_span(std::in_place, "embedding.forward", "model");
  hooks_->before_forward(0);
  // Activations take the dtype and device of the weights parallel/ gave the model.
  const DType act = tok_embeddings_->value.dtype(), stats = stats_dtype(act);
  const Device device = tok_embeddings_->value.device();
  const SequenceBatch& seq = sequence_batch(B, S, act, device);
  tokens_ = tokens.contiguous().view({T}).to(device);
  Tensor flat_targets = targets.contiguous().view({T}).to(device);
  Tensor embedded = Tensor::empty({T, D}, act, device);
  embedding_forward(embedded, tok_embeddings_->value, tokens_, vocab_start_);
  Tensor x = tp_->reduce_scatter_rows(embedded);  // [T/tp, D]: this rank's sequence shard
  embedded = {};
  hooks_->after_forward(0);
  embedding_span.reset();

  for (TransformerBlock& block : layers_) {
    const int i = block.layer_id();
    // The hooks (FSDP's gather of this block, the prefetch of the next) belong to the block.
    TT_PROFILE_SPAN("block." + std::to_string(i) + ".forward", "model");
    hooks_->before_forward(i + 1);
    x = block.forward(x, seq);
    if (!keep_for_backward) block.release_activations();
    hooks_->after_forward(i + 1);
  }

  profiler::Span head_span("head.forward", "model");
  hooks_->before_forward(groups - 1);
  final_x_ = x;
  final_xn_ = Tensor::empty(x.shape(), act, device);
  final_rstd_ = Tensor::empty({x.size(0)}, stats, device);
  rmsnorm_forward(final_xn_, final_rstd_, final_x_, norm_->value, args_.norm_eps);
  dlogits_ = output_.forward(final_xn_);  // [B·S, V_local] logits, soon their gradient

  // Loss parallel: each rank holds a vocab slice; only [T]-sized statistics cross ranks.
  profiler::Span loss_span("cross_entropy", "loss");
  Tensor row_max = Tensor::empty({T}, stats, device);
  Tensor sum_exp = Tensor::empty({T}, stats, device);
  Tensor target_logit = Tensor::empty({T}, stats, device);
  Tensor losses = Tensor::empty({T}, stats, device);
  cross_entropy_row_max(row_max, dlogits_);
  tp_->all_reduce(row_max, ReduceOp::Max);
  cross_entropy_row_sums(sum_exp, target_logit, dlogits_, flat_targets, row_max, vocab_start_);
  tp_->all_reduce(sum_exp, ReduceOp::Sum);
  tp_->all_reduce(target_logit, ReduceOp::Sum);
  cross_entropy_loss_and_grad(losses, dlogits_, dlogits_, flat_targets, row_max, sum_exp,
                              target_logit, vocab_start_, grad_scale);
  hooks_->after_forward(groups - 1);

  const Tensor host_losses = losses.to(Device::cpu());  // T numbers: the one host sync
  return visit_floating(stats, "loss sum", [&]<class T_>() {
    double sum = 0;
    for (int64_t t = 0; t < T; ++t) sum += host_losses.data<T_>()[t];
    return sum;
  });
}

void Transformer::backward() {
  TT_CHECK(dlogits_.defined(), "backward without a forward");
  const int groups = args_.n_layers + 2;
  profiler::Span backward_span("backward", "model");
  MemoryTagScope outside_blocks(MemoryTag::activations(-1));

  std::optional<profiler::Span> head_span(std::in_place, "head.backward", "model");
  hooks_->before_backward(groups - 1);
  Tensor dxn = output_.backward(dlogits_, final_xn_);
  dlogits_ = {};
  final_xn_ = {};
  Tensor dx = Tensor::empty(final_x_.shape(), final_x_.dtype(), final_x_.device());
  rmsnorm_backward(dx, norm_->grad, dxn, final_x_, norm_->value, final_rstd_);
  final_x_ = {};
  final_rstd_ = {};
  hooks_->after_backward(groups - 1);
  head_span.reset();

  for (auto block = layers_.rbegin(); block != layers_.rend(); ++block) {
    const int i = block->layer_id();
    // Its recompute (activation checkpointing) and FSDP's gather and reduce-scatter inside.
    TT_PROFILE_SPAN("block." + std::to_string(i) + ".backward", "model");
    hooks_->before_backward(i + 1);
    dx = block->backward(dx);
    hooks_->after_backward(i + 1);
  }

  profiler::Span embedding_span("embedding.backward", "model");
  hooks_->before_backward(0);
  Tensor dembedded = tp_->all_gather_rows(dx);  // [B·S, D]
  embedding_backward(tok_embeddings_->grad, dembedded, tokens_, vocab_start_);
  tokens_ = {};
  hooks_->after_backward(0);
}

int64_t Transformer::saved_activation_bytes() const {
  int64_t bytes = 0;
  for (const TransformerBlock& block : layers_) bytes += block.saved_bytes();
  for (const Tensor* t : {&final_x_, &final_xn_, &final_rstd_, &dlogits_}) {
    if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  }
  return bytes;
}

}  // namespace titan::model
