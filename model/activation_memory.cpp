#include "model/activation_memory.h"

#include <utility>

#include "core/check.h"

namespace titan::model {

namespace {

double d(int64_t v) { return static_cast<double>(v); }

}  // namespace

void GemmsMemory::whole(MemoryTimeline& t, GemmKind gemm, int64_t a_rows, int64_t a_cols,
                        int64_t b_rows, int64_t b_cols, int64_t m, int64_t n, int64_t k,
                        double element_bytes, const Bytes& a_values, const Bytes& b_values) {
  // LinearGemms::whole: a before b (their preparation may be collective), both held for the GEMM.
  const PreparedOperand a = prepare_a(t, gemm, a_rows, a_cols, element_bytes);
  const PreparedOperand b = prepare_b(t, gemm, b_rows, b_cols, element_bytes);
  if (gemm == GemmKind::GradWeight && deferred_ != nullptr) {
    DeferredGradWeight later;
    later.gemms = this;
    later.m = m;
    later.n = n;
    later.k = k;
    for (const auto& [op, values] : {std::pair{&a, &a_values}, std::pair{&b, &b_values}}) {
      if (op->plain) later.operands.push_back(*values);
      later.operands.insert(later.operands.end(), op->held.begin(), op->held.end());
    }
    deferred_->push_back(std::move(later));
    return;
  }
  run(t, gemm, m, n, k);
}

void GemmsMemory::defer_made(std::vector<Bytes> held, std::function<void(MemoryTimeline&)> later) {
  TT_CHECK(deferred_ != nullptr, "GemmsMemory::defer_made outside a split backward");
  DeferredGradWeight made;
  made.operands = std::move(held);
  made.gemms = this;
  made.later = std::move(later);
  deferred_->push_back(std::move(made));
}

void run_deferred(MemoryTimeline& t, ParamHooksMemory& hooks,
                  std::vector<DeferredGradWeight> deferred) {
  for (size_t i = 0; i < deferred.size();) {
    const int group = deferred[i].group;
    hooks.before_weight_gradients(t, group);
    for (; i < deferred.size() && deferred[i].group == group; ++i) {
      DeferredGradWeight& gemm = deferred[i];
      if (gemm.later) {
        gemm.later(t);
      } else {
        gemm.gemms->run(t, GemmKind::GradWeight, gemm.m, gemm.n, gemm.k);
      }
      gemm.operands.clear();
    }
    hooks.after_weight_gradients(t, group);
  }
}

PreparedOperand HighPrecisionGemmsMemory::prepare(MemoryTimeline& t, int64_t rows, int64_t cols,
                                                  double element_bytes) {
  PreparedOperand op;
  op.row_bytes = d(cols) * element_bytes;
  // HighPrecisionGemms::operand: f32 rounded into a clone; bf16 operands are already rounded.
  if (bf16_copies_ && element_bytes == 4) {
    op.held.push_back(t.hold(d(rows) * d(cols) * 4));
    op.plain = false;
  }
  return op;
}

PreparedOperand HighPrecisionGemmsMemory::prepare_a(MemoryTimeline& t, GemmKind, int64_t rows,
                                                    int64_t cols, double element_bytes) {
  return prepare(t, rows, cols, element_bytes);
}

PreparedOperand HighPrecisionGemmsMemory::prepare_b(MemoryTimeline& t, GemmKind, int64_t rows,
                                                    int64_t cols, double element_bytes) {
  return prepare(t, rows, cols, element_bytes);
}

Bytes LocalLinearMemory::forward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                                 GemmsMemory& gemms) {
  Bytes y = t.hold(d(rows) * d(w.out) * e);  // [T, out]
  gemms.whole(t, GemmKind::Output, rows, w.in, w.out, w.in, rows, w.out, w.in, e);
  return y;
}

Bytes LocalLinearMemory::backward(MemoryTimeline& t, int64_t rows, const LinearShape& w, double e,
                                  GemmsMemory& gemms, const Bytes& dy, const Bytes& x) {
  Bytes dx = t.hold(d(rows) * d(w.in) * e);  // [T, in]
  gemms.whole(t, GemmKind::GradInput, rows, w.out, w.out, w.in, rows, w.in, w.out, e);
  gemms.whole(t, GemmKind::GradWeight, rows, w.out, rows, w.in, w.out, w.in, rows, e, dy, x);
  return dx;
}

// TransformerBlock's BlockActivations.
struct TransformerMemory::Block {
  Bytes x, attn_rstd, xn, qkv, attn, lse, h, ffn_rstd, hn, h13, g;

  double bytes() const {
    double sum = 0;
    for (const Bytes* b : {&x, &attn_rstd, &xn, &qkv, &attn, &lse, &h, &ffn_rstd, &hn, &h13, &g})
      sum += b->size();
    return sum;
  }
};

TransformerMemory::TransformerMemory(const ModelArgs& args,
                                     const ActivationCheckpointPolicy& policy,
                                     const ActivationShape& shape, LinearSeamsFor linears,
                                     ParamHooksMemory& hooks)
    : args_(args), policy_(policy), shape_(shape), hooks_(hooks) {
  if (shape_.layers < 0) shape_.layers = static_cast<int>(args_.n_layers) - shape_.first_layer;
  TT_CHECK(shape_.tp >= 1 && shape_.first_layer >= 0 &&
               shape_.first_layer + shape_.layers <= args_.n_layers,
           "TransformerMemory: layers [", shape_.first_layer, ", ",
           shape_.first_layer + shape_.layers, ") of ", args_.n_layers, " at tp ", shape_.tp);
  blocks_.resize(static_cast<size_t>(args_.n_layers));
  // The linears' seams, looked up once: a plan search replays thousands of blocks.
  seams_.resize(static_cast<size_t>(args_.n_layers));
  for (int l = shape_.first_layer; l < shape_.first_layer + shape_.layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    BlockSeams& b = seams_[static_cast<size_t>(l)];
    auto seams = [&](const std::string& fqn) {
      LinearSeams found = linears(fqn);
      found.fqn = fqn;
      return found;
    };
    b = {seams(prefix + "attention.wqkv"), seams(prefix + "attention.wo"),
         seams(prefix + "feed_forward.w13"), seams(prefix + "feed_forward.w2")};
    // Local head counts come from the weights, as in transformer_block.cpp.
    b.heads = b.wo.weight.in / args_.head_dim();
    b.kv_heads = (b.wqkv.weight.out / args_.head_dim() - b.heads) / 2;
  }
  if (shape_.head) {
    output_seams_ = linears("output");
    output_seams_.fqn = "output";
  }
}

TransformerMemory::~TransformerMemory() = default;

void TransformerMemory::block_forward_all(MemoryTimeline& t, Block& b, const Bytes& x) {
  const int64_t B = shape_.batch, S = shape_.seq_len, BS = B * S, D = args_.dim;
  const int64_t rows = BS / shape_.tp;  // x [T, D], the sequence shard
  const double e = shape_.element_bytes, st = shape_.stats_bytes;
  const BlockSeams& s = seams_[static_cast<size_t>(&b - blocks_.data())];
  const LinearSeams &wqkv = s.wqkv, &wo = s.wo, &w13 = s.w13;
  const int64_t Dh = args_.head_dim(), heads = s.heads;

  b.x = x;
  b.attn_rstd = t.hold(d(rows) * st);
  b.xn = t.hold(d(rows) * d(D) * e);
  b.qkv = wqkv.style->forward(t, rows, wqkv.weight, e, *wqkv.gemms);  // [B·S, (H + 2·Hkv)·Dh]
  b.attn = t.hold(d(BS) * d(heads * Dh) * e);
  b.lse = t.hold(d(B) * d(heads) * d(S) * st);
  if (shape_.context_parallel) shape_.context_parallel->attention_forward(t, cp_attention(s));
  b.h = wo.style->forward(t, BS, wo.weight, e, *wo.gemms);  // [T, D]
  b.ffn_rstd = t.hold(d(rows) * st);
  b.hn = t.hold(d(rows) * d(D) * e);
  b.h13 = w13.style->forward(t, rows, w13.weight, e, *w13.gemms);  // [B·S, 2·F]
  b.g = t.hold(d(BS) * d(w13.weight.out / 2) * e);
}

void TransformerMemory::drop_recomputable(Block& b) {
  const int layer = static_cast<int>(&b - blocks_.data());
  switch (policy_.for_block(layer)) {
    case BlockRecompute::None: break;
    case BlockRecompute::Op:
      b.xn = {};
      b.hn = {};
      b.g = {};
      break;
    case BlockRecompute::Full: {
      Block input_only;
      input_only.x = b.x;
      b = std::move(input_only);
      break;
    }
  }
}

Bytes TransformerMemory::block_forward(MemoryTimeline& t, int layer, const Bytes& x) {
  MemoryTimeline::Tag tag(t, MemoryCategory::Activations);
  Block& b = blocks_[static_cast<size_t>(layer)];
  block_forward_all(t, b, x);
  const LinearSeams& w2 = seams_[static_cast<size_t>(layer)].w2;
  Bytes out = w2.style->forward(t, shape_.batch * shape_.seq_len, w2.weight, shape_.element_bytes,
                                *w2.gemms);
  drop_recomputable(b);
  return out;
}

Bytes TransformerMemory::block_backward(MemoryTimeline& t, int layer, const Bytes& dout) {
  MemoryTimeline::Tag tag(t, MemoryCategory::Activations);
  Block& b = blocks_[static_cast<size_t>(layer)];
  const int64_t B = shape_.batch, S = shape_.seq_len, BS = B * S, D = args_.dim;
  const int64_t rows = BS / shape_.tp;
  const double e = shape_.element_bytes;
  const BlockSeams& s = seams_[static_cast<size_t>(layer)];
  const LinearSeams &wqkv = s.wqkv, &wo = s.wo, &w13 = s.w13, &w2 = s.w2;
  const int64_t Dh = args_.head_dim(), heads = s.heads;

  // recompute_dropped()
  switch (policy_.for_block(layer)) {
    case BlockRecompute::None: break;
    case BlockRecompute::Op:
      b.xn = t.hold(d(rows) * d(D) * e);
      b.hn = t.hold(d(rows) * d(D) * e);
      b.g = t.hold(d(BS) * d(w13.weight.out / 2) * e);
      break;
    case BlockRecompute::Full: block_forward_all(t, b, b.x); break;
  }

  // Feed-forward half.
  Bytes dg = linear_backward(t, w2, BS, dout, b.g);  // [B·S, F]
  b.g = {};
  Bytes dh13 = t.hold(d(BS) * d(w13.weight.out) * e);
  dg = {};
  b.h13 = {};
  Bytes dhn = linear_backward(t, w13, rows, dh13, b.hn);  // [T, D]
  dh13 = {};
  b.hn = {};
  Bytes dh = t.hold(d(rows) * d(D) * e);
  dhn = {};
  b.h = {};
  b.ffn_rstd = {};

  // Attention half.
  Bytes dattn = linear_backward(t, wo, BS, dh, b.attn);  // [B·S, H·Dh]
  Bytes dqkv = t.hold(d(BS) * d(wqkv.weight.out) * e);
  if (shape_.context_parallel) {
    shape_.context_parallel->attention_backward(t, cp_attention(s));
  } else if (shape_.cuda) {
    // attention_backward_cuda's workspaces: Δ [B, H, S] and dq [B·S, H·Dh], f32.
    const Bytes delta = t.hold(d(B) * d(heads) * d(S) * 4);
    const Bytes dq = t.hold(d(BS) * d(heads * Dh) * 4);
  }
  dattn = {};
  b.attn = {};
  b.qkv = {};
  b.lse = {};
  Bytes dxn = linear_backward(t, wqkv, rows, dqkv, b.xn);  // [T, D]
  dqkv = {};
  b.xn = {};
  Bytes dx = t.hold(d(rows) * d(D) * e);
  b = Block{};
  return dx;
}

ContextParallelMemory::Attention TransformerMemory::cp_attention(const BlockSeams& s) const {
  return {shape_.batch,     shape_.seq_len,       s.heads,    s.kv_heads,
          args_.head_dim(), shape_.element_bytes, shape_.cuda};
}

void TransformerMemory::forward(MemoryTimeline& t, const Bytes& input) {
  const int64_t B = shape_.batch, S = shape_.seq_len, BS = B * S, D = args_.dim;
  const int64_t rows = BS / shape_.tp;
  const double e = shape_.element_bytes, st = shape_.stats_bytes;
  const int head_group = static_cast<int>(args_.n_layers) + 1;
  MemoryTimeline::Tag outside_blocks(t, MemoryCategory::Activations);

  // Transformer::forward_part.
  Bytes x;
  if (shape_.embedding) {
    hooks_.before_forward(t, 0);
    // The tokens [B·S] i32 stay the trainer's on the CPU; CUDA copies them over.
    tokens_ = shape_.cuda ? t.hold(d(BS) * 4) : input;
    const Bytes embedded = t.hold(d(BS) * d(D) * e);            // [B·S, D]
    x = shape_.tp > 1 ? t.hold(d(rows) * d(D) * e) : embedded;  // reduce_scatter_rows: [T, D]
    hooks_.after_forward(t, 0);
  } else {
    x = input;  // a pipeline stage's input, received or handed over from the one before
  }
  // sequence_batch: the RoPE tables [S, Dh/2], cos and sin, built once and kept across steps;
  // built on the host and moved, so on CUDA only the moved copy is the device's.
  if (!rope_.held()) rope_ = t.hold(2 * d(S) * d(args_.head_dim() / 2) * st);

  for (int i = shape_.first_layer; i < shape_.first_layer + shape_.layers; ++i) {
    hooks_.before_forward(t, i + 1);
    x = block_forward(t, i, x);
    hooks_.after_forward(t, i + 1);
  }

  if (!shape_.head) {
    final_x_ = x;  // sent to the next stage; held until its gradient comes back
    return;
  }
  hooks_.before_forward(t, head_group);
  final_x_ = x;
  final_xn_ = t.hold(d(rows) * d(D) * e);
  final_rstd_ = t.hold(d(rows) * st);
  const LinearSeams& output = output_seams_;
  dlogits_ = output.style->forward(t, rows, output.weight, e, *output.gemms);  // [B·S, V]
  {
    // loss_and_grad: the targets (moved to CUDA), and cross-entropy's per-token statistics —
    // row max, sum of exponentials, target logit, loss — for the loss's one host sync.
    const Bytes flat_targets = shape_.cuda ? t.hold(d(BS) * 4) : Bytes();
    const Bytes row_max = t.hold(d(BS) * st), sum_exp = t.hold(d(BS) * st),
                target_logit = t.hold(d(BS) * st), losses = t.hold(d(BS) * st);
  }
  hooks_.after_forward(t, head_group);
}

// A linear's backward; in a split backward its grad-weight GEMM waits for W (deferred_).
Bytes TransformerMemory::linear_backward(MemoryTimeline& t, const LinearSeams& linear, int64_t rows,
                                         const Bytes& dy, const Bytes& x) {
  linear.gemms->defer_grad_weight(deferring_ ? &deferred_ : nullptr);
  const size_t before = deferred_.size();
  Bytes dx =
      linear.style->backward(t, rows, linear.weight, shape_.element_bytes, *linear.gemms, dy, x);
  linear.gemms->defer_grad_weight(nullptr);
  for (size_t i = before; i < deferred_.size(); ++i) deferred_[i].weight = linear.fqn + ".weight";
  return dx;
}

void TransformerMemory::before_group_backward(MemoryTimeline& t, int group,
                                              const std::vector<const LinearSeams*>& linears) {
  if (!deferring_) {
    hooks_.before_backward(t, group);
    return;
  }
  std::vector<std::string> weights;
  for (const LinearSeams* linear : linears) weights.push_back(linear->fqn + ".weight");
  hooks_.before_backward_input(t, group, weights);
}

void TransformerMemory::after_group_backward(MemoryTimeline& t, int group) {
  // WeightGradQueue::end_group, and Transformer::backward_part's choice of hook.
  std::vector<std::string> weights;
  for (size_t i = deferred_grouped_; i < deferred_.size(); ++i) {
    deferred_[i].group = group;
    weights.push_back(deferred_[i].weight);
  }
  deferred_grouped_ = deferred_.size();
  if (weights.empty()) {
    hooks_.after_backward(t, group);
  } else {
    hooks_.after_backward_input(t, group, weights);
  }
}

std::vector<DeferredGradWeight> TransformerMemory::take_deferred() {
  deferred_grouped_ = 0;
  return std::exchange(deferred_, {});
}

Bytes TransformerMemory::backward(MemoryTimeline& t, const Bytes& dout, bool defer_weight_grads) {
  deferring_ = defer_weight_grads;
  const int64_t BS = shape_.batch * shape_.seq_len, D = args_.dim;
  const int64_t rows = BS / shape_.tp;
  const double e = shape_.element_bytes;
  const int head_group = static_cast<int>(args_.n_layers) + 1;
  MemoryTimeline::Tag outside_blocks(t, MemoryCategory::Activations);

  // Transformer::backward_part.
  Bytes dx;
  if (shape_.head) {
    before_group_backward(t, head_group, {&output_seams_});
    // Transformer::backward_part: a tied embedding's gradient exists before the output's dW.
    if (args_.tie_word_embeddings && shape_.embedding) hooks_.before_backward(t, 0);
    const LinearSeams& output = output_seams_;
    const Bytes dxn = linear_backward(t, output, rows, dlogits_, final_xn_);  // [T, D]
    dlogits_ = {};
    final_xn_ = {};
    dx = t.hold(d(rows) * d(D) * e);
    final_x_ = {};
    final_rstd_ = {};
    after_group_backward(t, head_group);
  } else {
    dx = dout;  // the gradient received or handed over from the next stage
    final_x_ = {};
  }

  for (int i = shape_.first_layer + shape_.layers - 1; i >= shape_.first_layer; --i) {
    const BlockSeams& s = seams_[static_cast<size_t>(i)];
    before_group_backward(t, i + 1, {&s.wqkv, &s.wo, &s.w13, &s.w2});
    dx = block_backward(t, i, dx);
    after_group_backward(t, i + 1);
  }

  if (shape_.embedding) {
    hooks_.before_backward(t, 0);
    const Bytes dembedded = shape_.tp > 1 ? t.hold(d(BS) * d(D) * e) : dx;  // all_gather_rows
    tokens_ = {};
    after_group_backward(t, 0);
    return {};
  }
  return dx;
}

struct TransformerMemory::Saved {
  std::vector<Block> blocks;
  Bytes tokens, final_x, final_xn, final_rstd, dlogits;
};

std::shared_ptr<TransformerMemory::Saved> TransformerMemory::take_saved() {
  auto saved = std::make_shared<Saved>();
  saved->blocks = std::exchange(blocks_, std::vector<Block>(blocks_.size()));
  saved->tokens = std::exchange(tokens_, {});
  saved->final_x = std::exchange(final_x_, {});
  saved->final_xn = std::exchange(final_xn_, {});
  saved->final_rstd = std::exchange(final_rstd_, {});
  saved->dlogits = std::exchange(dlogits_, {});
  return saved;
}

void TransformerMemory::restore_saved(std::shared_ptr<Saved> saved) {
  TT_CHECK(saved != nullptr, "TransformerMemory::restore_saved: nothing saved");
  blocks_ = std::move(saved->blocks);
  tokens_ = std::move(saved->tokens);
  final_x_ = std::move(saved->final_x);
  final_xn_ = std::move(saved->final_xn);
  final_rstd_ = std::move(saved->final_rstd);
  dlogits_ = std::move(saved->dlogits);
}

double TransformerMemory::saved_bytes() const {
  double bytes = 0;
  for (const Block& b : blocks_) bytes += b.bytes();
  for (const Bytes* b : {&final_x_, &final_xn_, &final_rstd_, &dlogits_}) bytes += b->size();
  return bytes;
}

}  // namespace titan::model
