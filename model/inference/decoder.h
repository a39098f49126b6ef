// Text generation's forward pass: a Transformer's weights run on new tokens only, the keys and
// values of earlier positions read from a KV cache (kv_cache.h).
//
// Training's forward (transformer.cpp) computes whole [B, S] windows. Here a call feeds any rows
// — a prompt's n tokens (prefill) or one token per sequence (decode), each appended at its
// sequence's next position — and returns the logits of the rows asked for. The arithmetic is
// training's, op for op (embedding, RMSNorm, wqkv, RoPE, wo, SwiGLU's w13 and w2, the residual
// adds, the final norm, output), its GEMMs through core (gemm, or gemv_rows for a CPU linear of
// a few rows: a decode step); only attention differs: attention_decode
// (model/ops/attention/attention_decode.h) against the cache, in place of causal attention over the
// whole window. test/model/test_decoder.cpp holds the logits of every
// decoded position against training's own forward over the whole sequence.
//
// Positions: row t of sequence b is at position cache.length(b) + (rows of b before t in this
// call); RoPE rotates it by that position (one table row per fed row), and attention_decode
// lets it see positions 0..its own.
//
// Tensor parallelism, Megatron-style without the sequence split (a decode step has one row per
// sequence, too few to split): the caller gives each parameter its tp slice before allocating
// (Parameter::slice, as parallel/ does for training) — wqkv's and w13's rows (this rank's heads
// and ffn slice), wo's and w2's columns, tok_embeddings' and output's vocabulary rows — and the
// tp group as a TensorParallelComm. wo's and w2's outputs and the embedding are then summed over
// the group (all_reduce), the logits come out vocabulary-sharded and are gathered, and the
// cache holds this rank's kv heads. Every rank feeds the same tokens.
//
// dtypes follow the weights (model/precision.h): f32 on the CPU, f32 or bf16 on CUDA. On the CPU,
// DecoderOptions::bf16_gemm_operands rounds each GEMM's activation operand to bf16 (the caller
// rounds the weights once), the CPU's emulation of a bf16 GEMM that training uses too, and
// cache_dtype bf16 halves the cache.
//
// CUDA graph (DecoderOptions::cuda_graph, docs/generation.md#cuda-graph): a decode step — one row
// per sequence, every row's logits — is captured once per row count as one CUDA graph, from the
// embedding to the output GEMM, and replayed for every later step of that count. The graph reads
// each row's token, sequence, position and RoPE rows from device buffers of its own, written
// before each replay; no launch depends on a cache length (attention_decode's grid is rows ×
// heads, and each CTA reads its position from device memory), so one graph serves every length.
// Prefill, and any call that is not a decode step, runs eagerly. One rank only: the tp
// all-reduce of titan_generate goes through MPI on the host, which a graph cannot hold.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/inference/kv_cache.h"
#include "model/model_comm.h"
#include "model/transformer.h"

namespace titan::model {

struct DecoderOptions {
  DType cache_dtype = DType::F32;   // the activations' dtype, or bf16 beside f32 on the CPU
  bool bf16_gemm_operands = false;  // CPU: round each GEMM's activation operand to bf16
  bool cuda_graph = false;          // CUDA, one rank: decode steps replay a captured graph
};

class Decoder {
 public:
  // Reads `model`'s parameters (allocated: each holds its tp slice); `tp` is the tensor-parallel
  // group the slices were cut for (the default: one rank).
  Decoder(Transformer& model, DecoderOptions options,
          std::shared_ptr<TensorParallelComm> tp = std::make_shared<TensorParallelComm>());
  ~Decoder();

  // What start(batch, max_seq) allocates, to report or refuse before allocating it.
  KvCacheShape cache_shape(int64_t batch, int64_t max_seq) const;
  // A new cache: `batch` empty sequences of up to `max_seq` positions each (and no graph: the
  // old one was captured on the old cache's buffers).
  void start(int64_t batch, int64_t max_seq);

  // Appends tokens[t] to sequence seqs[t], t = 0..T-1 (the rows of one sequence in order), and
  // returns the logits [R, V] (f32, on the host) of the rows logit_rows lists (indices into
  // tokens, R of them). Collective over the tp group: every rank passes the same arguments.
  Tensor forward(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                 std::span<const int64_t> logit_rows);

  int64_t length(int64_t seq) const { return cache_->length(seq); }
  const KvCache& cache() const { return *cache_; }
  int64_t vocab_size() const { return args_.vocab_size; }  // V, every rank's logits
  const ModelArgs& args() const { return args_; }
  // Graphs captured so far (a new one per decode row count, or after start()).
  int64_t graphs_captured() const { return graphs_captured_; }

 private:
  struct BlockWeights {
    const Parameter* attention_norm;
    const Parameter* wqkv;
    const Parameter* wo;
    const Parameter* ffn_norm;
    const Parameter* w13;
    const Parameter* w2;
  };

  // One call's rows in two buffers, so that they reach the device in two copies: index [3, T]
  // i32 (each row's token id, sequence, position) and rope [2, T, Dh/2] (each row's RoPE table
  // rows, cos then sin).
  struct StepRows {
    Tensor index, rope;
    Tensor ids() const { return index.narrow(0, 0, 1).view({index.size(1)}); }
    Tensor seq() const { return index.narrow(0, 1, 1).view({index.size(1)}); }
    Tensor pos() const { return index.narrow(0, 2, 1).view({index.size(1)}); }
    Tensor cos() const { return rope.narrow(0, 0, 1).view({rope.size(1), rope.size(2)}); }
    Tensor sin() const { return rope.narrow(0, 1, 1).view({rope.size(1), rope.size(2)}); }
  };
  struct DecodeGraph;

  // The rows of a call, on the host; added[b] counts the rows of sequence b.
  StepRows place_rows(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                      std::vector<int64_t>& added) const;
  // Every block over the rows (on the weights' device): x [T, D], the residual stream before the
  // final norm. Allocates and launches only: a graph can capture it.
  Tensor run_blocks(const StepRows& rows) const;
  // The decode step's logits [T, V] (host f32) through the graph of T rows, captured first if
  // there is none of T rows.
  Tensor replay_decode(const StepRows& rows);

  // y [T, out] = x [T, in] · wᵀ, as training's linears compute it.
  Tensor linear(const Tensor& x, const Parameter& w) const;
  Tensor rmsnorm(const Tensor& x, const Parameter& weight) const;
  // x += residual, then rmsnorm of x (add_rmsnorm_forward: one kernel on CUDA).
  Tensor add_rmsnorm(const Tensor& x, const Tensor& residual, const Parameter& weight) const;
  // The output projection of rows x [R, D]: logits [R, V] on the host, gathered over tp.
  Tensor logits(const Tensor& x) const;
  // Its device half, for a CUDA x or many CPU rows: [V_local, R] = W · final_norm(x)ᵀ (f32
  // from bf16), on x's device. Allocates and launches only.
  Tensor project_transposed(const Tensor& x) const;
  // Its host half: [V_local, R] gathered over tp, to the host, transposed: [R, V] f32.
  Tensor host_logits(Tensor transposed) const;

  ModelArgs args_;
  DecoderOptions options_;
  std::shared_ptr<TensorParallelComm> tp_;
  const Parameter* tok_embeddings_;
  const Parameter* norm_;
  const Parameter* output_;
  std::vector<BlockWeights> blocks_;
  int64_t heads_ = 0, kv_heads_ = 0;  // this rank's H and Hkv
  int64_t embedding_start_ = 0;       // this rank's first vocabulary row of tok_embeddings
  Tensor rope_cos_, rope_sin_;        // [S_max, Dh/2], host, every position of the cache
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<DecodeGraph> graph_;  // of graph_->rows rows, on cache_'s buffers
  int64_t graphs_captured_ = 0;
};

}  // namespace titan::model
