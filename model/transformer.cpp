#include "model/transformer.h"

#include <cmath>
#include <optional>
#include <utility>

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

// Runs before any member is built, so bad dims never reach an allocation. A program that reads
// its dims from a user validates them first under its own names (titan_train: "model"); here
// they are the struct's.
const ModelArgs& validated(const ModelArgs& args) {
  validate_model_args(args, "ModelArgs");
  validate_lora(args.lora, "ModelArgs.lora");
  return args;
}

ModelPart resolved(const ModelPart& part, const ModelArgs& args) {
  ModelPart p = part;
  if (p.end_layer < 0) p.end_layer = args.n_layers;
  TT_CHECK(0 <= p.first_layer && p.first_layer <= p.end_layer && p.end_layer <= args.n_layers,
           "ModelPart: layers [", p.first_layer, ", ", p.end_layer, ") of a model of ",
           args.n_layers);
  TT_CHECK(!p.embedding || p.first_layer == 0, "ModelPart: the embedding belongs to the part ",
           "that starts at layer 0, not ", p.first_layer);
  TT_CHECK(!p.head || p.end_layer == args.n_layers, "ModelPart: the head belongs to the part ",
           "that ends at layer ", args.n_layers, ", not ", p.end_layer);
  TT_CHECK(p.embedding || p.head || p.first_layer < p.end_layer, "ModelPart: an empty part");
  return p;
}

// Sets (and on scope exit clears) the queue every linear of a backward defers into.
class DeferWeightGrads {
 public:
  DeferWeightGrads(std::vector<Linear*> linears, WeightGradQueue* queue)
      : linears_(std::move(linears)) {
    for (Linear* linear : linears_) linear->set_weight_grad_queue(queue);
  }
  ~DeferWeightGrads() {
    for (Linear* linear : linears_) linear->set_weight_grad_queue(nullptr);
  }
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  std::vector<Linear*> linears_;
};

}  // namespace

Transformer::Transformer(const ModelArgs& args, DType dtype, const ModelPart& part)
    : args_(validated(args)),
      part_(resolved(part, args)),
      dtype_(dtype),
      tp_(std::make_shared<TensorParallelComm>()),
      cp_(std::make_shared<ContextParallelComm>()),
      hooks_(std::make_shared<ParamHooks>()) {
  // nn.init.normal_ (std 1) for the embedding; trunc-normal at 3σ with std D^-1/2 for the
  // output projection: torchtitan's init_weights.
  //
  // Tied (model.tie_word_embeddings, Llama 3.2): one weight E serves both, the logits x·Eᵀ. It is
  // initialised as the output projection, as torchtitan's init_weights leaves the shared tensor
  // (the output's init runs after the embedding's). A part with both ends holds E once and its
  // output Linear computes with it; a pipeline's last stage, which has no embedding, holds a copy
  // (output.weight, tied_to E, its one part initialised under E's name, so equal to it) whose
  // gradient parallel/tied_weights.h sums with the first stage's before every step.
  const InitSpec output_init =
      InitSpec::truncated_normal(std::pow(args.dim, -0.5), 3.0 * std::pow(args.dim, -0.5));
  const bool tied = args.tie_word_embeddings;
  if (part_.embedding) {
    tok_embeddings_ = own_parameter(declare_parameter("tok_embeddings.weight",
                                                      {args.vocab_size, args.dim},
                                                      tied ? output_init : InitSpec::normal(1.0),
                                                      dtype));
  }
  if (part_.head) {
    norm_ = own_parameter(declare_parameter("norm.weight", {args.dim}, InitSpec::ones(), dtype));
    if (tied && part_.embedding) {
      output_ = std::make_unique<Linear>("output", tok_embeddings_.get());
    } else {
      output_weight_ =
          tied ? own_parameter(declare_fused_parameter(
                     "output.weight", {{"tok_embeddings.weight", args.vocab_size, output_init}},
                     args.dim, dtype))
               : own_parameter(declare_parameter("output.weight", {args.vocab_size, args.dim},
                                                 output_init, dtype));
      if (tied) output_weight_->tied_to = "tok_embeddings.weight";
      output_ = std::make_unique<Linear>("output", output_weight_.get());
    }
  }
  layers_.reserve(part_.end_layer - part_.first_layer);
  for (int64_t i = part_.first_layer; i < part_.end_layer; ++i) {
    layers_.emplace_back(static_cast<int>(i), args, dtype);
  }
  // LoRA: the adapters the blocks declared train; every other weight is frozen.
  if (args_.lora.enabled()) {
    for (Parameter* p : parameters()) p->frozen = !p->adapter;
  }
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
  if (part_.embedding) {
    groups.push_back({"tok_embeddings", 0, {tok_embeddings_.get()}, /*read_by_head=*/head_ties()});
  }
  for (TransformerBlock& block : layers_) {
    groups.push_back(
        {"layers." + std::to_string(block.layer_id()), block.layer_id() + 1, block.parameters()});
  }
  if (part_.head) {
    std::vector<Parameter*> head{norm_.get()};
    if (output_weight_) head.push_back(output_weight_.get());
    groups.push_back({kHeadGroupName, head_group(), head});
  }
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
  if (output_) all.push_back(output_.get());
  return all;
}

void Transformer::set_activation_checkpoint(const ActivationCheckpointPolicy& policy) {
  for (TransformerBlock& block : layers_) block.set_recompute(policy.for_block(block.layer_id()));
}

void Transformer::set_tensor_parallel(std::shared_ptr<TensorParallelComm> comm) {
  TT_CHECK(comm != nullptr, "set_tensor_parallel: null communicator");
  tp_ = std::move(comm);
}

void Transformer::set_context_parallel(std::shared_ptr<ContextParallelComm> comm) {
  TT_CHECK(comm != nullptr, "set_context_parallel: null communicator");
  cp_ = std::move(comm);
  for (TransformerBlock& block : layers_) block.set_context_parallel(cp_);
  batch_ = {};  // the RoPE tables were this rank's positions under the old group
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
                                                 Device device, const Tensor& doc_start) {
  // The tables are built on the CPU and moved: in the activations' dtype there, fp32 on CUDA.
  // Under cp they cover the whole sequence of seq_len · cp positions, and this rank keeps the
  // rows of its tokens.
  const DType table_dtype = stats_dtype(activations);
  if (batch_.seq_len != seq_len || batch_.rope_cos.dtype() != table_dtype ||
      batch_.rope_cos.device() != device) {
    const int64_t half = args_.head_dim() / 2, positions = seq_len * cp_->size();
    Tensor cos = Tensor::empty({positions, half}, table_dtype);
    Tensor sin = Tensor::empty({positions, half}, table_dtype);
    rope_tables(cos, sin, args_.head_dim(), args_.rope_theta, args_.rope_scaling);
    batch_.rope_cos = cp_->local_rows(cos).to(device);
    batch_.rope_sin = cp_->local_rows(sin).to(device);
  }
  batch_.batch = batch;
  batch_.seq_len = seq_len;
  // Fresh tensors for each micro-batch: the blocks of micro-batches still in flight (a pipeline
  // stage) hold the ones they were given.
  batch_.mask = {};
  if (doc_start.defined()) {
    TT_CHECK(doc_start.ndim() == 2 && doc_start.size(0) == batch && doc_start.size(1) == seq_len &&
                 doc_start.dtype() == DType::I32,
             "forward: doc_start must be i32 [B, S] = [", batch, ", ", seq_len, "], got ",
             doc_start);
    batch_.mask.doc_start_host = doc_start.to(Device::cpu()).contiguous();
    batch_.mask.doc_start = batch_.mask.doc_start_host.to(device);
  }
  return batch_;
}

double Transformer::forward(const Tensor& tokens, const Tensor& targets, double grad_scale,
                            const Tensor& doc_start) {
  TT_CHECK(part_ == resolved(ModelPart::whole(), args_),
           "forward: this Transformer holds a part of ", "the model; run it with forward_part");
  TT_CHECK(tokens.ndim() == 2 && targets.shape() == tokens.shape(),
           "forward: tokens and targets must both be [B, S], got ", tokens, " and ", targets);
  return forward_part(tokens, targets, tokens.size(0), tokens.size(1), grad_scale,
                      /*keep_for_backward=*/true, doc_start)
      .loss_sum;
}

double Transformer::evaluate(const Tensor& tokens, const Tensor& targets, const Tensor& doc_start) {
  TT_CHECK(tokens.ndim() == 2 && targets.shape() == tokens.shape(),
           "evaluate: tokens and targets must both be [B, S], got ", tokens, " and ", targets);
  // A gradient scale of 0: the loss kernel still writes its (zero) gradient over the logits in
  // place, which costs nothing extra and keeps one loss path for training and validation.
  const double loss = forward_part(tokens, targets, tokens.size(0), tokens.size(1), 0.0,
                                   /*keep_for_backward=*/false, doc_start)
                          .loss_sum;
  release_activations();
  return loss;
}

Tensor Transformer::evaluate_tokens(const Tensor& tokens, const Tensor& targets,
                                    const Tensor& doc_start) {
  TT_CHECK(tokens.ndim() == 2 && targets.shape() == tokens.shape(),
           "evaluate_tokens: tokens and targets must both be [B, S], got ", tokens, " and ",
           targets);
  TT_CHECK(part_.embedding && part_.head, "evaluate_tokens: the whole model, not a part");
  evaluate(tokens, targets, doc_start);
  return take_token_losses().view({tokens.size(0), tokens.size(1)});
}

void Transformer::release_activations() {
  for (TransformerBlock& block : layers_) block.release_activations();
  tokens_ = {};
  final_x_ = {};
  final_xn_ = {};
  final_rstd_ = {};
  dlogits_ = {};
}

PartOutput Transformer::forward_part(const Tensor& input, const Tensor& targets, int64_t batch,
                                     int64_t seq_len, double grad_scale, bool keep_for_backward,
                                     const Tensor& doc_start) {
  const int64_t B = batch, S = seq_len, T = B * S, D = args_.dim;
  profiler::Span forward_span(keep_for_backward ? "forward" : "evaluate", "model");
  // What forward makes outside the blocks (embedding, final norm, logits, loss); each block
  // tags its own (transformer_block.cpp), and FSDP's gathers tag theirs.
  MemoryTagScope outside_blocks(MemoryTag::activations(-1));

  Tensor x;
  if (part_.embedding) {
    TT_CHECK(input.ndim() == 2 && input.size(0) == B && input.size(1) == S,
             "forward: tokens must be [B, S] = [", B, ", ", S, "], got ", input);
    profiler::Span embedding_span("embedding.forward", "model");
    hooks_->before_forward(0);
    // Activations take the dtype and device of the weights parallel/ gave the model.
    const DType act = tok_embeddings_->value.dtype();
    const Device device = tok_embeddings_->value.device();
    tokens_ = input.contiguous().view({T}).to(device);
    Tensor embedded = Tensor::empty({T, D}, act, device);
    embedding_forward(embedded, tok_embeddings_->value, tokens_, vocab_start_);
    x = tp_->reduce_scatter_rows(embedded);  // [T/tp, D]: this rank's sequence shard
    hooks_->after_forward(0);
  } else {
    TT_CHECK(input.ndim() == 2 && input.size(1) == D && input.size(0) * tp_->size() == T,
             "forward: a part from layer ", part_.first_layer, " takes x [T/tp, D] = [",
             T / tp_->size(), ", ", D, "], got ", input);
    x = input;
  }
  const SequenceBatch& seq = sequence_batch(B, S, x.dtype(), x.device(), doc_start);

  for (TransformerBlock& block : layers_) {
    const int i = block.layer_id();
    // The hooks (FSDP's gather of this block, the prefetch of the next) belong to the block.
    TT_PROFILE_SPAN("block." + std::to_string(i) + ".forward", "model");
    hooks_->before_forward(i + 1);
    x = block.forward(x, seq);
    if (!keep_for_backward) block.release_activations();
    hooks_->after_forward(i + 1);
  }
  if (!part_.head) return {x, 0.0};

  profiler::Span head_span("head.forward", "model");
  hooks_->before_forward(head_group());
  final_x_ = x;
  final_xn_ = Tensor::empty(x.shape(), x.dtype(), x.device());
  final_rstd_ = Tensor::empty({x.size(0)}, stats_dtype(x.dtype()), x.device());
  rmsnorm_forward(final_xn_, final_rstd_, final_x_, norm_->value, args_.norm_eps);
  dlogits_ = output_->forward(final_xn_);  // [B·S, V_local] logits, soon their gradient
  TT_CHECK(targets.numel() == T, "forward: targets must be [B, S] = [", B, ", ", S, "], got ",
           targets);
  const double loss = loss_and_grad(targets, grad_scale);
  hooks_->after_forward(head_group());
  return {Tensor(), loss};
}

double Transformer::loss_and_grad(const Tensor& targets, double grad_scale) {
  // Loss parallel: each rank holds a vocab slice; only [T]-sized statistics cross ranks.
  profiler::Span loss_span("cross_entropy", "loss");
  const int64_t T = dlogits_.size(0);
  const DType stats = stats_dtype(dlogits_.dtype());
  const Device device = dlogits_.device();
  // Targets no loss reaches (negative: a prompt's tokens) run as id 0 through the three
  // phases, whose rows are then zeroed: the loss and gradients of the trained tokens alone.
  Tensor host_targets = targets.to(Device::cpu()).contiguous().view({T});
  Tensor trained;
  for (int64_t t = 0; t < T; ++t) {
    if (host_targets.data<int32_t>()[t] >= 0) continue;
    if (!trained.defined()) {
      host_targets = host_targets.clone();
      trained = Tensor::empty({T}, DType::U8);
      trained.fill_(1);
    }
    host_targets.data<int32_t>()[t] = 0;
    trained.data<uint8_t>()[t] = 0;
  }
  Tensor flat_targets = host_targets.to(device);
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
  if (trained.defined()) cross_entropy_zero_untrained(losses, dlogits_, trained.to(device));

  const Tensor host_losses = losses.to(Device::cpu());  // T numbers: the one host sync
  token_losses_ = host_losses;
  return visit_floating(stats, "loss sum", [&]<class T_>() {
    double sum = 0;
    for (int64_t t = 0; t < T; ++t) sum += host_losses.data<T_>()[t];
    return sum;
  });
}

void Transformer::backward() {
  TT_CHECK(part_.embedding && part_.head, "backward: this Transformer holds a part of the ",
           "model; run it with backward_part");
  backward_part(Tensor());
}

Tensor Transformer::backward_part(const Tensor& dx_out, WeightGrads weight_grads) {
  profiler::Span backward_span("backward", "model");
  MemoryTagScope outside_blocks(MemoryTag::activations(-1));
  TT_CHECK(weight_grads_.empty(), "backward: the weight gradients of the last split backward ",
           "have not run (backward_weights)");
  const bool split = weight_grads == WeightGrads::Deferred;
  DeferWeightGrads defer(split ? linears() : std::vector<Linear*>{}, &weight_grads_);
  // The start of a group's backward: in a split one, of its input half, the linears' weights
  // waiting for W.
  auto before_backward = [&](int group, const std::vector<Linear*>& group_linears) {
    if (!split) {
      hooks_->before_backward(group);
      return;
    }
    std::vector<Parameter*> deferred;
    for (Linear* linear : group_linears) {
      if (linear->weight().trained()) deferred.push_back(&linear->weight());  // frozen: none
    }
    hooks_->before_backward_input(group, deferred);
  };
  // The end of a group's backward: in a split one, of its input half when it deferred a GEMM.
  auto after_backward = [&](int group) {
    std::vector<Parameter*> deferred =
        split ? weight_grads_.end_group(group) : std::vector<Parameter*>{};
    if (deferred.empty()) {
      hooks_->after_backward(group);
    } else {
      hooks_->after_backward_input(group, deferred);
    }
  };

  Tensor dx;
  if (part_.head) {
    TT_CHECK(dlogits_.defined(), "backward without a forward");
    profiler::Span head_span("head.backward", "model");
    before_backward(head_group(), {output_.get()});
    // The tied embedding's gradient, which the output's dW adds into first (ParamGroup).
    if (head_ties()) hooks_->before_backward(0);
    Tensor dxn = output_->backward(dlogits_, final_xn_);
    dlogits_ = {};
    final_xn_ = {};
    dx = Tensor::empty(final_x_.shape(), final_x_.dtype(), final_x_.device());
    rmsnorm_backward(dx, gradient_sink(*norm_), dxn, final_x_, norm_->value, final_rstd_);
    final_x_ = {};
    final_rstd_ = {};
    after_backward(head_group());
  } else {
    TT_CHECK(dx_out.defined(), "backward: a part that ends at layer ", part_.end_layer,
             " needs the gradient of its output");
    dx = dx_out;
  }

  for (auto block = layers_.rbegin(); block != layers_.rend(); ++block) {
    const int i = block->layer_id();
    // Its recompute (activation checkpointing) and FSDP's gather and reduce-scatter inside.
    TT_PROFILE_SPAN("block." + std::to_string(i) + ".backward", "model");
    before_backward(i + 1, block->linears());
    dx = block->backward(dx);
    after_backward(i + 1);
  }
  if (!part_.embedding) return dx;

  profiler::Span embedding_span("embedding.backward", "model");
  hooks_->before_backward(0);
  if (tok_embeddings_->trained()) {  // a frozen embedding needs nothing of dx
    Tensor dembedded = tp_->all_gather_rows(dx);  // [B·S, D]
    embedding_backward(tok_embeddings_->grad, dembedded, tokens_, vocab_start_);
  }
  tokens_ = {};
  after_backward(0);
  return Tensor();
}

void Transformer::backward_weights() {
  profiler::Span span("backward.weights", "model");
  MemoryTagScope outside_blocks(MemoryTag::activations(-1));
  weight_grads_.run(*hooks_);
}

PartActivations Transformer::take_activations() {
  PartActivations a;
  a.blocks.reserve(layers_.size());
  for (TransformerBlock& block : layers_) a.blocks.push_back(block.take_state());
  a.tokens = std::exchange(tokens_, {});
  a.final_x = std::exchange(final_x_, {});
  a.final_xn = std::exchange(final_xn_, {});
  a.final_rstd = std::exchange(final_rstd_, {});
  a.dlogits = std::exchange(dlogits_, {});
  a.weight_grads = std::exchange(weight_grads_, {});
  return a;
}

void Transformer::restore_activations(PartActivations a) {
  TT_CHECK(a.blocks.size() == layers_.size(), "restore_activations: ", a.blocks.size(),
           " blocks' state for a part of ", layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i].restore_state(std::move(a.blocks[i]));
  tokens_ = std::move(a.tokens);
  final_x_ = std::move(a.final_x);
  final_xn_ = std::move(a.final_xn);
  final_rstd_ = std::move(a.final_rstd);
  dlogits_ = std::move(a.dlogits);
  weight_grads_ = std::move(a.weight_grads);
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
