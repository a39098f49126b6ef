#include "model/inference/decoder.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/bf16.h"
#include "core/cast.h"
#include "core/cuda/backend.h"
#include "core/gemm.h"
#include "core/profiler.h"
#include "model/ops/attention/attention_decode.h"
#include "model/ops/embedding.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/ops/swiglu.h"
#include "model/ops/tensor_math.h"
#include "model/precision.h"

namespace titan::model {

namespace {

const Parameter* named(const std::vector<Parameter*>& params, size_t i, std::string_view suffix) {
  TT_CHECK(i < params.size() && std::string_view(params[i]->name).ends_with(suffix),
           "decoder: parameter ", i, " of its group is not ", suffix);
  TT_CHECK(params[i]->allocated(), "decoder: ", params[i]->name, " has no storage");
  return params[i];
}

// The first full row this rank's slice of p holds (its vocabulary start, for the embeddings).
int64_t first_row(const Parameter& p) {
  return p.slice.dim == 0 ? p.slice.index * (p.shape[0] / p.slice.count) : 0;
}

// Rows up to which a CPU linear runs one matrix-vector product per row (core's gemv_rows)
// rather than one sgemm: measured on the 2-core VM, OpenBLAS 0.3.21, the debug model's shapes.
constexpr int64_t kGemvRows = 3;

bool few_cpu_rows(const Tensor& x) { return x.device().is_cpu() && x.size(0) <= kGemvRows; }

// x rounded to bf16 (a copy): the activation operand of an emulated bf16 GEMM on the CPU.
Tensor bf16_rounded(const Tensor& x) {
  Tensor rounded = x.clone();
  float* p = rounded.data<float>();
  for (int64_t i = 0; i < rounded.numel(); ++i) p[i] = round_to_bf16(p[i]);
  return rounded;
}

// [rows, cols] f32 on the host -> its transpose.
Tensor transpose_host(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor out = Tensor::empty({cols, rows}, DType::F32);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
  return out;
}

}  // namespace

Decoder::Decoder(Transformer& model, DecoderOptions options, std::shared_ptr<TensorParallelComm> tp)
    : args_(model.args()), options_(options), tp_(std::move(tp)) {
  TT_CHECK(tp_ != nullptr, "decoder: null tensor-parallel group");
  const std::vector<ParamGroup> groups = model.param_groups();
  TT_CHECK(groups.size() == static_cast<size_t>(args_.n_layers) + 2,
           "decoder: expected embeddings, ", args_.n_layers, " blocks and the head");
  tok_embeddings_ = named(groups.front().params, 0, "tok_embeddings.weight");
  for (int64_t l = 0; l < args_.n_layers; ++l) {
    const std::vector<Parameter*>& p = groups[static_cast<size_t>(l) + 1].params;
    blocks_.push_back({named(p, 0, "attention_norm.weight"), named(p, 1, "attention.wqkv.weight"),
                       named(p, 2, "attention.wo.weight"), named(p, 3, "ffn_norm.weight"),
                       named(p, 4, "feed_forward.w13.weight"),
                       named(p, 5, "feed_forward.w2.weight")});
  }
  norm_ = named(groups.back().params, 0, "norm.weight");
  output_ = named(groups.back().params, 1, "output.weight");
  // Local head counts come from the weights, as in transformer_block.cpp: a tp slice needs no
  // special case.
  const int64_t Dh = args_.head_dim();
  heads_ = blocks_.front().wo->value.size(1) / Dh;
  kv_heads_ = (blocks_.front().wqkv->value.size(0) / Dh - heads_) / 2;
  embedding_start_ = first_row(*tok_embeddings_);
  TT_CHECK(
      options_.cache_dtype == tok_embeddings_->value.dtype() || options_.cache_dtype == DType::BF16,
      "decoder: a ", dtype_name(options_.cache_dtype), " cache beside ",
      dtype_name(tok_embeddings_->value.dtype()), " weights");
  TT_CHECK(!options_.bf16_gemm_operands || tok_embeddings_->value.device().is_cpu(),
           "decoder: bf16_gemm_operands emulates bf16 GEMMs on the CPU; on CUDA give bf16 weights");
  TT_CHECK(!options_.cuda_graph || tp_->size() == 1, "decoder: a CUDA graph of the decode step on ",
           tp_->size(), " tp ranks; the tp all-reduce cannot be captured: use one rank");
  TT_CHECK(!options_.cuda_graph || tok_embeddings_->value.device().is_cuda(),
           "decoder: a CUDA graph of the decode step needs CUDA weights, not ",
           tok_embeddings_->value.device());
}

// The graph of one decode row count and the buffers it reads and writes, which live as long as
// it does. Members go in reverse order: the graph (waiting for its replays) before its buffers.
struct Decoder::DecodeGraph {
  int64_t rows = 0;   // T
  StepRows inputs;    // on the device, written before each replay
  Tensor transposed;  // [V, T] f32, what a replay computes
  std::unique_ptr<cuda_backend::StreamGraph> graph;
};

Decoder::~Decoder() = default;

KvCacheShape Decoder::cache_shape(int64_t batch, int64_t max_seq) const {
  return {args_.n_layers, batch, kv_heads_, max_seq, args_.head_dim(), options_.cache_dtype};
}

void Decoder::start(int64_t batch, int64_t max_seq) {
  TT_CHECK(batch > 0 && max_seq > 0, "decoder: start(", batch, ", ", max_seq, ")");
  const Device device = tok_embeddings_->value.device();
  graph_.reset();  // captured on the old cache's buffers
  cache_.reset();  // the old cache's memory first
  cache_ = std::make_unique<KvCache>(cache_shape(batch, max_seq), device);
  // Built as training builds them (Transformer::sequence_batch): row p of a table is the same
  // for any table length, so position p rotates exactly as in a training window.
  const DType table = stats_dtype(tok_embeddings_->value.dtype());
  if (!rope_cos_.defined() || rope_cos_.size(0) < max_seq || rope_cos_.dtype() != table) {
    rope_cos_ = Tensor::empty({max_seq, args_.head_dim() / 2}, table);
    rope_sin_ = Tensor::empty({max_seq, args_.head_dim() / 2}, table);
    rope_tables(rope_cos_, rope_sin_, args_.head_dim(), args_.rope_theta, args_.rope_scaling);
  }
}

Tensor Decoder::linear(const Tensor& x, const Parameter& w) const {
  Tensor y = Tensor::empty({x.size(0), w.value.size(0)}, x.dtype(), x.device());
  const Tensor operand = options_.bf16_gemm_operands ? bf16_rounded(x) : x;
  if (few_cpu_rows(x)) {
    gemv_rows(operand, w.value, y);  // a decode step: y = x · wᵀ, reading w once per row
  } else {
    gemm(operand, false, w.value, true, y);
  }
  return y;
}

Tensor Decoder::rmsnorm(const Tensor& x, const Parameter& weight) const {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({x.size(0)}, stats_dtype(x.dtype()), x.device());
  rmsnorm_forward(y, rstd, x, weight.value, args_.norm_eps);
  return y;
}

Tensor Decoder::add_rmsnorm(const Tensor& x, const Tensor& residual,
                            const Parameter& weight) const {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty({x.size(0)}, stats_dtype(x.dtype()), x.device());
  add_rmsnorm_forward(y, rstd, x, residual, weight.value, args_.norm_eps);
  return y;
}

Tensor Decoder::project_transposed(const Tensor& x) const {
  Tensor xn = rmsnorm(x, *norm_);
  if (options_.bf16_gemm_operands) xn = bf16_rounded(xn);
  // f32 even from bf16 operands (cuBLASLt accumulates in fp32): the sampler compares logits,
  // and rounding them to bf16 would turn near-ties into ties.
  const DType dtype = xn.dtype() == DType::BF16 ? DType::F32 : xn.dtype();
  // Transposed, [V_local, R] = W · xnᵀ, so that the vocabulary shards of the tp ranks stack by
  // rows and one all-gather of rows puts them in vocabulary order.
  Tensor transposed = Tensor::empty({output_->value.size(0), x.size(0)}, dtype, x.device());
  gemm(output_->value, false, xn, true, transposed);
  return transposed;
}

Tensor Decoder::host_logits(Tensor transposed) const {
  if (tp_->size() > 1) transposed = tp_->all_gather_rows(transposed);
  Tensor host = transposed.to(Device::cpu());
  if (host.dtype() != DType::F32) host = cast(host, DType::F32);
  TT_CHECK(host.size(0) == args_.vocab_size, "decoder: gathered ", host.size(0),
           " logits of a vocabulary of ", args_.vocab_size);
  return transpose_host(host);
}

Tensor Decoder::logits(const Tensor& x) const {
  TT_PROFILE_SPAN("decoder.logits", "model");
  if (!few_cpu_rows(x)) return host_logits(project_transposed(x));
  const int64_t R = x.size(0), V_local = output_->value.size(0);
  Tensor xn = rmsnorm(x, *norm_);
  if (options_.bf16_gemm_operands) xn = bf16_rounded(xn);
  Tensor rows = Tensor::empty({R, V_local}, xn.dtype());
  gemv_rows(xn, output_->value, rows);
  if (rows.dtype() != DType::F32) rows = cast(rows, DType::F32);
  if (tp_->size() == 1) return rows;  // [R, V] already
  return host_logits(transpose_host(rows));
}

Decoder::StepRows Decoder::place_rows(std::span<const int32_t> tokens,
                                      std::span<const int32_t> seqs,
                                      std::vector<int64_t>& added) const {
  const int64_t T = static_cast<int64_t>(tokens.size()), half = args_.head_dim() / 2;
  const KvCacheShape& shape = cache_->shape();
  StepRows rows{Tensor::empty({3, T}, DType::I32), Tensor::empty({2, T, half}, rope_cos_.dtype())};
  int32_t* index = rows.index.data<int32_t>();  // ids, then sequences, then positions
  const size_t table_row = static_cast<size_t>(half) * dtype_size(rope_cos_.dtype());
  char* cos = static_cast<char*>(rows.rope.raw_data());
  char* sin = cos + T * table_row;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t b = seqs[static_cast<size_t>(t)];
    TT_CHECK(b >= 0 && b < shape.batch, "decoder: sequence ", b, " of a batch of ", shape.batch);
    const int64_t p = cache_->length(b) + added[static_cast<size_t>(b)]++;
    TT_CHECK(p < shape.max_seq, "decoder: sequence ", b, " is full (", shape.max_seq,
             " positions)");
    index[t] = tokens[static_cast<size_t>(t)];
    index[T + t] = b;
    index[2 * T + t] = static_cast<int32_t>(p);
    std::memcpy(cos + t * table_row, static_cast<const char*>(rope_cos_.raw_data()) + p * table_row,
                table_row);
    std::memcpy(sin + t * table_row, static_cast<const char*>(rope_sin_.raw_data()) + p * table_row,
                table_row);
  }
  return rows;
}

Tensor Decoder::run_blocks(const StepRows& rows) const {
  const int64_t T = rows.index.size(1), D = args_.dim, Dh = args_.head_dim();
  const Tensor seq = rows.seq(), pos = rows.pos(), cos = rows.cos(), sin = rows.sin();
  const Device device = tok_embeddings_->value.device();
  const DType act = tok_embeddings_->value.dtype();
  Tensor x = Tensor::empty({T, D}, act, device);
  embedding_forward(x, tok_embeddings_->value, rows.ids(), embedding_start_);
  if (tp_->size() > 1) tp_->all_reduce(x, ReduceOp::Sum);  // each rank looked up its rows

  const DecodeAttentionShape attention{heads_, kv_heads_, Dh};
  // attention_norm(x) of the block about to run: a residual add before it is fused with it.
  Tensor xn = blocks_.empty() ? Tensor() : rmsnorm(x, *blocks_.front().attention_norm);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    TT_PROFILE_SPAN("decoder.block", "model");
    const BlockWeights& w = blocks_[l];
    // h = x + wo(attention(rope(wqkv(attention_norm(x)))))
    Tensor qkv = linear(xn, *w.wqkv);
    xn = {};
    rope_forward(qkv, cos, sin, /*seq_len=*/T, heads_ + kv_heads_, Dh);  // row t: t
    const Tensor& k = cache_->k(static_cast<int64_t>(l));
    const Tensor& v = cache_->v(static_cast<int64_t>(l));
    kv_cache_write(k, v, qkv, seq, pos, attention);
    Tensor attn = Tensor::empty({T, heads_ * Dh}, act, device);
    attention_decode(attn, qkv, k, v, seq, pos, attention);
    qkv = {};
    Tensor h = linear(attn, *w.wo);
    if (tp_->size() > 1) tp_->all_reduce(h, ReduceOp::Sum);
    // out = h + w2(swiglu(w13(ffn_norm(h))))
    const Tensor h13 = linear(add_rmsnorm(h, x, *w.ffn_norm), *w.w13);
    Tensor g = Tensor::empty({T, h13.size(1) / 2}, act, device);
    swiglu_forward(g, h13);
    x = linear(g, *w.w2);
    if (tp_->size() > 1) tp_->all_reduce(x, ReduceOp::Sum);
    if (l + 1 < blocks_.size()) {
      xn = add_rmsnorm(x, h, *blocks_[l + 1].attention_norm);
    } else {
      accumulate(x, h);  // logits() takes the final norm
    }
  }
  return x;
}

Tensor Decoder::replay_decode(const StepRows& rows) {
  const int64_t T = rows.index.size(1);
  if (graph_ == nullptr || graph_->rows != T) {
    graph_.reset();  // its pool back to the cache before the next one is captured
    const Device device = tok_embeddings_->value.device();
    auto fresh = std::make_unique<DecodeGraph>();
    fresh->rows = T;
    // Allocated before the capture, so that they stay where the graph reads them.
    fresh->inputs = {Tensor::empty(rows.index.shape(), DType::I32, device),
                     Tensor::empty(rows.rope.shape(), rows.rope.dtype(), device)};
    DecodeGraph& g = *fresh;
    g.graph = cuda_backend::capture_graph(detail::concat("the decode step of ", T, " rows"), [&] {
      g.transposed = project_transposed(run_blocks(g.inputs));
    });
    graph_ = std::move(fresh);
    ++graphs_captured_;
  }
  graph_->inputs.index.copy_from(rows.index);
  graph_->inputs.rope.copy_from(rows.rope);
  graph_->graph->replay();
  return host_logits(graph_->transposed);
}

Tensor Decoder::forward(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                        std::span<const int64_t> logit_rows) {
  TT_CHECK(cache_ != nullptr, "decoder: forward before start");
  TT_CHECK(tokens.size() == seqs.size() && !tokens.empty(), "decoder: ", tokens.size(),
           " tokens for ", seqs.size(), " sequence indices");
  TT_PROFILE_SPAN("decoder.forward", "model");
  const int64_t T = static_cast<int64_t>(tokens.size()), D = args_.dim;
  const int64_t batch = cache_->shape().batch;

  // Each row's position, and its RoPE table row.
  std::vector<int64_t> added(static_cast<size_t>(batch), 0);
  const StepRows rows = place_rows(tokens, seqs, added);
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  bool every_row = R == T;
  for (int64_t r = 0; every_row && r < R; ++r) every_row = logit_rows[static_cast<size_t>(r)] == r;

  if (options_.cuda_graph && every_row &&
      std::all_of(added.begin(), added.end(), [](int64_t n) { return n <= 1; })) {
    Tensor out = replay_decode(rows);
    for (int64_t b = 0; b < batch; ++b) cache_->advance(b, added[static_cast<size_t>(b)]);
    return out;
  }

  const Device device = tok_embeddings_->value.device();
  const Tensor x = run_blocks({rows.index.to(device), rows.rope.to(device)});
  for (int64_t b = 0; b < batch; ++b) cache_->advance(b, added[static_cast<size_t>(b)]);

  if (every_row) return logits(x);
  Tensor picked = Tensor::empty({R, D}, x.dtype(), device);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = logit_rows[static_cast<size_t>(r)];
    TT_CHECK(t >= 0 && t < T, "decoder: logits of row ", t, " of ", T);
    picked.rows(r, r + 1).copy_from(x.rows(t, t + 1));
  }
  return logits(picked);
}

}  // namespace titan::model
