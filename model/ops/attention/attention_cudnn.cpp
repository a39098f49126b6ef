// The SDPA graphs cuDNN's fused flash-attention engines recognise, forward and backward, built
// on core/cuda/cudnn.h with cuDNN's C backend API.
//
// cuDNN does not take "attention" as one operation here (its unified SDPA operation runs causal
// masks only from 9.21): its Hopper flash-attention engines match a graph of matmuls, pointwise
// ops and reductions of one exact shape and fuse it. That shape is the one cudnn-frontend's
// CompositeSDPANode and CompositeSDPABackwardNode expand to (include/cudnn_frontend/node/
// scaled_dot_product_flash_attention.h, softmax.h, diagonal_band_mask.h, utils/
// attn_score_modifiers.h, read for this, not copied), and build_forward()/build_backward()
// below make the same tensors and operations in the same order, with the attributes the
// frontend's nodes set (core/cuda/cudnn.cpp). Forward (scores s = scale·q·kᵀ):
//
//   s = matmul(q, kᵀ) · scale ─ [mask] ─ m = max(s) ─ e = exp(s − m) ─ z = Σ e
//   stats = m + log z   p = e / z (bf16)   o = matmul(p, v)
//
// Backward, with Δ = Σ dO ⊙ O per row (cuDNN's "softmax_sum", kept in a buffer of ours):
//
//   p = exp(scale·q·kᵀ − stats) [masked]   dV = pᵀ·dO   dP = dO·vᵀ
//   dS = (dP − Δ) ⊙ p · scale   dK = dSᵀ·q   dQ = dS·k (through an f32 buffer of ours)
//
// GQA: k and v keep their Hkv heads; the matmuls broadcast them over the H/Hkv query heads of a
// group, and the backward sums each group's dK and dV with a reduction over a virtual [B, H, …].
// The masks, with i a query row and j a key column of the block, are GEN_INDEX / CMP_GE /
// BINARY_SELECT(s, −inf): causal keeps j ≤ i, causal aligned to the last key keeps
// j ≤ i + S_kv − S_q.
//
// Layouts: q [B, H, S_q, Dh] with strides (batch, Dh, row, 1) is a view of rows that hold each
// token's heads side by side, so qkv's q, k and v columns, a chunk of them, the model's out and
// dqkv all go in with their own strides. k enters the first matmul as kᵀ [B, Hkv, Dh, S_kv]
// (strides (batch, Dh, 1, row)), and v the backward's dO·vᵀ as vᵀ the same way.
//
// Not verified without a GPU (the gpu tests decide; each failure names the graph and prints it
// whole, with what each engine said): that the attributes below are all the engines need, in
// particular the data types the frontend leaves to its context (f32 for every virtual tensor it
// does not type; bf16 for p, pᵀ, dSᵀ and the per-head dK, dV; f32 for the reshaped k of dS·k)
// The stats always reach cuDNN packed, [B, H, S_q] with strides (H·S_q, S_q, 1) at a 16-byte
// aligned address, the one layout every cuDNN sample and the frontend's own tests use: a view
// of another layout (a chunk of context parallelism's lse, [B, H, S] narrowed along S, or one at
// an odd column) is staged through a packed buffer (StagedStats below).
#include "model/ops/attention/attention_cudnn.h"
#include "model/ops/attention/attention_backend.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/cuda/cudnn.h"
#include "core/notice.h"
#include "core/cuda/stream.h"

namespace titan::model {

// Named, not anonymous: the model's sources compile in unity batches, where another file's
// helpers could have these names.
namespace cudnn_sdpa {

using cuda::CudnnGraph;
using Uid = CudnnGraph::Uid;
using Dims = CudnnGraph::Dims;

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;

enum class SdpaMask { None, Causal, CausalBottomRight };

const char* mask_name(SdpaMask m) {
  switch (m) {
    case SdpaMask::None: return "unmasked";
    case SdpaMask::Causal: return "causal";
    case SdpaMask::CausalBottomRight: return "causal from the last key";
  }
  return "?";
}

// A bf16 operand of token rows holding heads side by side: element (b, s, h, e) at
// ptr + b·sb + s·sr + h·Dh + e.
struct Rows {
  void* ptr = nullptr;
  int64_t sb = 0, sr = 0;
};
// lse (b, h, i) at ptr + b·sb + h·sh + i.
struct Stats {
  float* ptr = nullptr;
  int64_t sb = 0, sh = 0;
};

struct Sdpa {
  Sdpa(int64_t b, int64_t h, int64_t hkv, int64_t dh, int64_t sq, int64_t skv, SdpaMask m,
       AttentionBackend be)
      : B(b), H(h), Hkv(hkv), Dh(dh), Sq(sq), Skv(skv), mask(m), backend(be) {}
  int64_t B, H, Hkv, Dh, Sq, Skv;
  SdpaMask mask;
  AttentionBackend backend;  // auto falls back to the native kernels where no plan is built
  Rows q, k, v, o;
  Stats lse;
  Rows dout, dq, dk, dv;  // backward only
};

int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int64_t bytes : {16, 8, 4}) {
    if (a % static_cast<uintptr_t>(bytes) == 0) return bytes;
  }
  return 2;
}

Dims bhsd(const Rows& r, int64_t Dh) { return {r.sb, Dh, r.sr, 1}; }
Dims bhds(const Rows& r, int64_t Dh) { return {r.sb, Dh, 1, r.sr}; }  // the transpose

std::string shape_text(const Sdpa& s) {
  return detail::concat(mask_name(s.mask), " B ", s.B, ", H ", s.H, ", Hkv ", s.Hkv, ", Dh ", s.Dh,
                        ", S_q ", s.Sq, ", S_kv ", s.Skv);
}

// The mask of the scores x [B, H, S_q, S_kv]: x where the key is visible, else −inf.
Uid masked(CudnnGraph& g, Uid x, const Sdpa& s) {
  const Dims& dims = g.dims(x);
  const Dims& strides = g.strides(x);
  Uid row = g.virtual_tensor("row index", dims, strides, CUDNN_DATA_INT32);
  g.pointwise("gen_row_index", CUDNN_POINTWISE_GEN_INDEX, kF32, x, row, -1, -1, 2);
  const Uid col = g.virtual_tensor("col index", dims, strides, CUDNN_DATA_INT32);
  g.pointwise("gen_col_index", CUDNN_POINTWISE_GEN_INDEX, kF32, x, col, -1, -1, 3);
  if (s.mask == SdpaMask::CausalBottomRight) {
    const Uid s_kv = g.scalar("s_kv", static_cast<int32_t>(s.Skv), 4);
    const Uid shifted = g.virtual_tensor("row + s_kv", dims, strides, CUDNN_DATA_INT32);
    g.pointwise("row+skv", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row, shifted, s_kv);
    const Uid s_q = g.scalar("s_q", static_cast<int32_t>(s.Sq), 4);
    row = g.virtual_tensor("row + s_kv - s_q", dims, strides, CUDNN_DATA_INT32);
    g.pointwise("row+skv-sq", CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, shifted, row, s_q);
  }
  const Uid keep = g.virtual_tensor("row >= col", dims, strides, CUDNN_DATA_BOOLEAN);
  g.pointwise("row>=col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, keep, col);
  const Uid neg_inf = g.scalar("-inf", -std::numeric_limits<float>::infinity(), 4);
  const Uid out = g.virtual_tensor("masked scores", dims, strides, kF32);
  g.pointwise("binary_select", CUDNN_POINTWISE_BINARY_SELECT, kF32, x, out, neg_inf, keep);
  return out;
}

// One graph and the uids of the tensors a call binds.
struct SdpaPlan {
  std::unique_ptr<CudnnGraph> graph;
  Uid q = -1, k = -1, v = -1, o = -1, stats = -1;
  Uid dout = -1, dq = -1, dk = -1, dv = -1, softmax_sum = -1, dq_accum = -1;
};

// The gradient of k or v: out = aᵀ·b, [B, Hkv, S_kv, Dh]. Under GQA the matmul gives one per
// query head (virtual [B, H, S_kv, Dh], bf16) and a reduction sums each group's.
void kv_gradient(CudnnGraph& g, const Sdpa& s, const char* matmul_name, const char* reduce_name,
                 Uid a, Uid b, Uid out) {
  if (s.H == s.Hkv) return g.matmul(matmul_name, a, b, out);
  const Uid heads =
      g.virtual_tensor(std::string(matmul_name) + " of every query head", {s.B, s.H, s.Skv, s.Dh},
                       {s.H * s.Skv * s.Dh, s.Skv * s.Dh, s.Dh, 1}, kBf16);
  g.matmul(matmul_name, a, b, heads);
  g.reduction(reduce_name, CUDNN_REDUCE_TENSOR_ADD, heads, out);
}

// The tensors both directions bind: q, k as kᵀ, v (as vᵀ for the backward's dO·vᵀ), o.
void declare_operands(CudnnGraph& g, const Sdpa& s, SdpaPlan& plan, bool v_transposed) {
  const int64_t B = s.B, H = s.H, Hkv = s.Hkv, Dh = s.Dh, Sq = s.Sq, Skv = s.Skv;
  plan.q = g.tensor("q", {B, H, Sq, Dh}, bhsd(s.q, Dh), kBf16, alignment_of(s.q.ptr));
  plan.k = g.tensor("k (as kᵀ)", {B, Hkv, Dh, Skv}, bhds(s.k, Dh), kBf16, alignment_of(s.k.ptr));
  plan.v =
      v_transposed
          ? g.tensor("v (as vᵀ)", {B, Hkv, Dh, Skv}, bhds(s.v, Dh), kBf16, alignment_of(s.v.ptr))
          : g.tensor("v", {B, Hkv, Skv, Dh}, bhsd(s.v, Dh), kBf16, alignment_of(s.v.ptr));
  plan.o = g.tensor("o", {B, H, Sq, Dh}, bhsd(s.o, Dh), kBf16, alignment_of(s.o.ptr));
  plan.stats = g.tensor("stats (lse)", {B, H, Sq, 1}, {s.lse.sb, s.lse.sh, 1, 1}, kF32,
                        alignment_of(s.lse.ptr));
}

std::unique_ptr<SdpaPlan> build_forward(const Sdpa& s) {
  auto plan = std::make_unique<SdpaPlan>();
  plan->graph = std::make_unique<CudnnGraph>("sdpa forward " + shape_text(s));
  CudnnGraph& g = *plan->graph;
  const int64_t B = s.B, H = s.H, Dh = s.Dh, Sq = s.Sq, Skv = s.Skv;
  const Dims scores{B, H, Sq, Skv}, scores_strides{H * Sq * Skv, Sq * Skv, Skv, 1};
  const Dims row_stat{B, H, Sq, 1}, row_stat_strides{H * Sq, Sq, 1, 1};

  declare_operands(g, s, *plan, false);

  const Uid qk = g.virtual_tensor("q·kᵀ", scores, scores_strides, kF32);
  g.matmul("bmm1", plan->q, plan->k, qk);
  const Uid scale = g.scalar("attn_scale", static_cast<float>(1.0 / std::sqrt(double(Dh))), 4);
  Uid x = g.virtual_tensor("scaled scores", scores, scores_strides, kF32);
  g.pointwise("attn_scale", CUDNN_POINTWISE_MUL, kF32, qk, x, scale);
  if (s.mask != SdpaMask::None) x = masked(g, x, s);

  const Uid max = g.virtual_tensor("row max", row_stat, row_stat_strides, kF32);
  g.reduction("max", CUDNN_REDUCE_TENSOR_MAX, x, max);
  const Uid sub = g.virtual_tensor("scores - max", scores, scores_strides, kF32);
  g.pointwise("sub", CUDNN_POINTWISE_SUB, kF32, x, sub, max);
  const Uid e = g.virtual_tensor("exp", scores, scores_strides, kF32);
  g.pointwise("exp", CUDNN_POINTWISE_EXP, kF32, sub, e);
  const Uid sum = g.virtual_tensor("row sum of exp", row_stat, row_stat_strides, kF32);
  g.reduction("sum", CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const Uid log = g.virtual_tensor("log of sum", row_stat, row_stat_strides, kF32);
  g.pointwise("log", CUDNN_POINTWISE_LOG, kF32, sum, log);
  g.pointwise("add (stats)", CUDNN_POINTWISE_ADD, kF32, max, plan->stats, log);
  const Uid p = g.virtual_tensor("p", scores, scores_strides, kBf16);
  g.pointwise("div", CUDNN_POINTWISE_DIV, kF32, e, p, sum);
  g.matmul("bmm2", p, plan->v, plan->o);
  return plan;
}

std::unique_ptr<SdpaPlan> build_backward(const Sdpa& s) {
  auto plan = std::make_unique<SdpaPlan>();
  plan->graph = std::make_unique<CudnnGraph>("sdpa backward " + shape_text(s));
  CudnnGraph& g = *plan->graph;
  const int64_t B = s.B, H = s.H, Hkv = s.Hkv, Dh = s.Dh, Sq = s.Sq, Skv = s.Skv;
  const Dims scores{B, H, Sq, Skv}, scores_strides{H * Sq * Skv, Sq * Skv, Skv, 1};
  const Dims scores_t{B, H, Skv, Sq}, scores_t_strides{H * Sq * Skv, Sq * Skv, 1, Skv};
  const Dims row_stat{B, H, Sq, 1}, row_stat_strides{H * Sq, Sq, 1, 1};

  declare_operands(g, s, *plan, true);
  plan->dout = g.tensor("dO", {B, H, Sq, Dh}, bhsd(s.dout, Dh), kBf16, alignment_of(s.dout.ptr));
  plan->dq = g.tensor("dQ", {B, H, Sq, Dh}, bhsd(s.dq, Dh), kBf16, alignment_of(s.dq.ptr));
  plan->dk = g.tensor("dK", {B, Hkv, Skv, Dh}, bhsd(s.dk, Dh), kBf16, alignment_of(s.dk.ptr));
  plan->dv = g.tensor("dV", {B, Hkv, Skv, Dh}, bhsd(s.dv, Dh), kBf16, alignment_of(s.dv.ptr));
  const Uid scale = g.scalar("attn_scale", static_cast<float>(1.0 / std::sqrt(double(Dh))), 4);
  const Uid one = g.scalar("one", 1.0f, 4);

  // Δ = Σ_e dO ⊙ O, into softmax_sum: a buffer of ours, as cudnn-frontend's workspace holds it.
  // (The frontend gives dO ⊙ O these strides: as a virtual tensor it is never laid out.)
  const Uid do_o =
      g.virtual_tensor("dO * O", {B, H, Sq, Dh}, {H * Sq * Dh, Sq * Dh, H * Dh, 1}, kF32);
  g.pointwise("mul_dO_O", CUDNN_POINTWISE_MUL, kF32, plan->dout, do_o, plan->o);
  const Uid row_sum = g.virtual_tensor("row sum of dO * O", row_stat, row_stat_strides, kF32);
  g.reduction("reduce_dO_o", CUDNN_REDUCE_TENSOR_ADD, do_o, row_sum);
  plan->softmax_sum = g.tensor("softmax_sum (Δ)", row_stat, row_stat_strides, kF32);
  g.pointwise("scale_dropout_inv", CUDNN_POINTWISE_MUL, kF32, row_sum, plan->softmax_sum, one);

  // p = exp(scale·q·kᵀ − stats), masked; dV = pᵀ·dO.
  const Uid qk = g.virtual_tensor("q·kᵀ", scores, scores_strides, kF32);
  g.matmul("matmul_Q_KT", plan->q, plan->k, qk);
  const Uid scaled = g.virtual_tensor("scaled scores", scores, scores_strides, kF32);
  g.pointwise("mul_s_attn_scale", CUDNN_POINTWISE_MUL, kF32, qk, scaled, scale);
  Uid x = g.virtual_tensor("scores - stats", scores, scores_strides, kF32);
  g.pointwise("sub_s_m", CUDNN_POINTWISE_SUB, kF32, scaled, x, plan->stats);
  if (s.mask != SdpaMask::None) x = masked(g, x, s);
  const Uid p = g.virtual_tensor("p", scores, scores_strides, kF32);
  g.pointwise("exp_s", CUDNN_POINTWISE_EXP, kF32, x, p);
  const Uid p_t = g.virtual_tensor("pᵀ", scores_t, scores_t_strides, kBf16);
  g.reshape("reshape_p", p, p_t);
  kv_gradient(g, s, "matmul_pT_dO", "red_dV_head", p_t, plan->dout, plan->dv);

  // dS = (dO·vᵀ − Δ) ⊙ p · scale; dK = dSᵀ·q.
  const Uid dp = g.virtual_tensor("dO·vᵀ", scores, scores_strides, kF32);
  g.matmul("matmul_dO_VT", plan->dout, plan->v, dp);
  const Uid dp_sub = g.virtual_tensor("dP - Δ", scores, scores_strides, kF32);
  g.pointwise("sub_dP_softmax_sum", CUDNN_POINTWISE_SUB, kF32, dp, dp_sub, plan->softmax_sum);
  const Uid dp_p = g.virtual_tensor("(dP - Δ) * p", scores, scores_strides, kF32);
  g.pointwise("mul_dP_exp_s", CUDNN_POINTWISE_MUL, kF32, dp_sub, dp_p, p);
  const Uid ds = g.virtual_tensor("dS", scores, scores_strides, kF32);
  g.pointwise("mul_dS_attn_scale", CUDNN_POINTWISE_MUL, kF32, dp_p, ds, scale);
  const Uid ds_t = g.virtual_tensor("dSᵀ", scores_t, scores_t_strides, kBf16);
  g.reshape("reshape_dS", ds, ds_t);
  kv_gradient(g, s, "matmul_dST_Q", "red_dK_head", ds_t, plan->q, plan->dk);

  // dQ = dS·k, through an f32 buffer of ours (cudnn-frontend's dQ_accum) and an identity.
  const Uid k_rows = g.virtual_tensor("k", {B, Hkv, Skv, Dh}, bhsd(s.k, Dh), kF32);
  g.reshape("reshape_k", plan->k, k_rows);
  plan->dq_accum = g.tensor("dQ accumulator", {B, H, Sq, Dh}, {H * Sq * Dh, Sq * Dh, Dh, 1}, kF32);
  g.matmul("matmul_dS_K", ds, k_rows, plan->dq_accum);
  g.pointwise("identity_dQ", CUDNN_POINTWISE_IDENTITY, kF32, plan->dq_accum, plan->dq);
  return plan;
}

// ---- the cache of plans ------------------------------------------------------------------------

std::mutex plans_mutex;
// A null plan is a shape cuDNN had no plan for under auto: it runs on the native kernels.
std::map<std::vector<int64_t>, std::unique_ptr<SdpaPlan>> plans;
std::vector<std::string> plan_notes;

void add_rows(std::vector<int64_t>& key, const Rows& r) {
  key.insert(key.end(), {r.sb, r.sr, alignment_of(r.ptr)});
}

// The plan of `s` (built on first use): keyed by everything its graph bakes in. Null when cuDNN
// builds no plan for it and auto chose cuDNN: said once, and the caller runs the native kernel
// (forced to cudnn, the failure is the error, graph and engines' refusals included).
const SdpaPlan* plan_for(const Sdpa& s, bool backward) {
  std::vector<int64_t> key{cuda::current_device(),
                           backward,
                           static_cast<int64_t>(s.mask),
                           s.B,
                           s.H,
                           s.Hkv,
                           s.Dh,
                           s.Sq,
                           s.Skv,
                           s.lse.sb,
                           s.lse.sh,
                           alignment_of(s.lse.ptr)};
  for (const Rows* r : {&s.q, &s.k, &s.v, &s.o}) add_rows(key, *r);
  if (backward) {
    for (const Rows* r : {&s.dout, &s.dq, &s.dk, &s.dv}) add_rows(key, *r);
  }
  std::lock_guard lock(plans_mutex);
  if (const auto found = plans.find(key); found != plans.end()) return found->second.get();
  std::unique_ptr<SdpaPlan> built;
  try {
    built = backward ? build_backward(s) : build_forward(s);
    built->graph->build(cuda::cudnn_handle());
  } catch (const Error& e) {
    if (s.backend != AttentionBackend::Auto) throw;
    const std::string why = e.what();
    notice(detail::concat("attention: cuDNN has no plan for the ", backward ? "backward" : "forward",
                          " of ", shape_text(s), " (", why.substr(0, why.find('\n')),
                          "); model.attention_backend auto runs it on the native kernels"));
    plan_notes.push_back(detail::concat("sdpa ", backward ? "backward " : "forward ",
                                        shape_text(s), ": no plan, native kernels"));
    plans[key] = nullptr;
    return nullptr;
  }
  plan_notes.push_back(built->graph->name() + ": " + built->graph->plan_note());
  return (plans[key] = std::move(built)).get();
}

Tensor workspace(int64_t bytes, Device device) {
  return Tensor::empty({std::max<int64_t>(bytes, 1)}, DType::U8, device);
}

// Whether cuDNN ran it (false: no plan under auto; nothing was written).
bool run_forward(const Sdpa& s, Device device) {
  const SdpaPlan* plan = plan_for(s, false);
  if (plan == nullptr) return false;
  const Tensor ws = workspace(plan->graph->workspace_bytes(), device);
  plan->graph->execute(cuda::cudnn_handle(),
                       {{plan->q, s.q.ptr},
                        {plan->k, s.k.ptr},
                        {plan->v, s.v.ptr},
                        {plan->o, s.o.ptr},
                        {plan->stats, s.lse.ptr}},
                       ws.raw_data());
  return true;
}

bool run_backward(const Sdpa& s, Device device) {
  const SdpaPlan* plan = plan_for(s, true);
  if (plan == nullptr) return false;
  const Tensor ws = workspace(plan->graph->workspace_bytes(), device);
  // Δ [B, H, S_q] and the dQ accumulator [B, H, S_q, Dh], f32: cudnn-frontend carves them out
  // of its workspace; here they come from the caching allocator, on this stream.
  const Tensor softmax_sum = Tensor::empty({s.B, s.H, s.Sq}, DType::F32, device);
  const Tensor dq_accum = Tensor::empty({s.B, s.H, s.Sq, s.Dh}, DType::F32, device);
  plan->graph->execute(cuda::cudnn_handle(),
                       {{plan->q, s.q.ptr},
                        {plan->k, s.k.ptr},
                        {plan->v, s.v.ptr},
                        {plan->o, s.o.ptr},
                        {plan->dout, s.dout.ptr},
                        {plan->stats, s.lse.ptr},
                        {plan->dq, s.dq.ptr},
                        {plan->dk, s.dk.ptr},
                        {plan->dv, s.dv.ptr},
                        {plan->softmax_sum, softmax_sum.raw_data()},
                        {plan->dq_accum, dq_accum.raw_data()}},
                       ws.raw_data());
  return true;
}

// ---- operands ----------------------------------------------------------------------------------

void check_device(const Tensor& t) {
  TT_CHECK(t.device().is_cuda() && t.device().index == cuda::current_device(),
           "attention on cuDNN: tensors on ", t.device(), " but the current CUDA device is ",
           cuda::current_device(), "; call titan::cuda::set_device first");
}

// A [B, S, N] view (or the [B·S, N] buffer of B sequences of S rows) as rows, from column `col`.
Rows rows_of(const Tensor& t, int64_t seq_len, int64_t col) {
  check_device(t);
  const size_t elem = dtype_size(t.dtype());
  char* base = static_cast<char*>(t.raw_data()) + col * static_cast<int64_t>(elem);
  if (t.ndim() == 2) return {base, seq_len * t.strides()[0], t.strides()[0]};
  return {base, t.strides()[0], t.strides()[1]};
}

Stats stats_of(const Tensor& lse) {
  check_device(lse);
  return {static_cast<float*>(lse.raw_data()), lse.strides()[0], lse.strides()[1]};
}

SdpaMask block_mask(const AttentionBlockShape& a) {
  if (kv_block_place(a) == KvBlockPlace::Past) return SdpaMask::None;
  return a.q_pos == a.kv_pos ? SdpaMask::Causal : SdpaMask::CausalBottomRight;
}

Sdpa full_sdpa(const AttentionShape& a) {
  return {a.batch, a.n_heads, a.n_kv_heads, a.head_dim, a.seq_len, a.seq_len, SdpaMask::Causal,
          a.backend};
}

Sdpa block_sdpa(const AttentionBlockShape& a) {
  return {a.batch, a.n_heads, a.n_kv_heads, a.head_dim, a.q_len, a.kv_len, block_mask(a),
          a.backend};
}

// Whether cuDNN can take `lse` [B, H, S_q] as it is: contiguous and 16-byte aligned.
bool stats_packed(const Tensor& lse) {
  return lse.is_contiguous() && reinterpret_cast<uintptr_t>(lse.raw_data()) % 16 == 0;
}

// The stats as cuDNN takes them, for a view that may not be packed (stats_packed): the view
// itself when it is, else a packed buffer, filled from the view for a backward (which reads
// them) and written back to it by finish() after a forward (which writes them).
class StagedStats {
 public:
  StagedStats(const Tensor& lse, bool read)
      : view_(lse),
        staged_(!stats_packed(lse)),
        packed_(staged_ ? Tensor::empty(lse.shape(), DType::F32, lse.device()) : lse) {
    if (read && staged_) attention_cudnn_to_f32(packed_, view_, false);
  }
  const Tensor& packed() const { return packed_; }
  void finish() const {
    if (staged_) attention_cudnn_to_f32(view_, packed_, false);
  }

 private:
  Tensor view_;
  bool staged_;
  Tensor packed_;
};

}  // namespace cudnn_sdpa

using namespace cudnn_sdpa;

bool attention_forward_cudnn(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             const AttentionShape& a) {
  const int64_t S = a.seq_len, Dh = a.head_dim;
  Sdpa s = full_sdpa(a);
  s.q = rows_of(qkv, S, 0);
  s.k = rows_of(qkv, S, a.n_heads * Dh);
  s.v = rows_of(qkv, S, (a.n_heads + a.n_kv_heads) * Dh);
  s.o = rows_of(out, S, 0);
  const StagedStats stats(lse, false);
  s.lse = stats_of(stats.packed());
  if (!run_forward(s, qkv.device())) return false;
  stats.finish();
  return true;
}

bool attention_backward_cudnn(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const AttentionShape& a) {
  const int64_t S = a.seq_len, Dh = a.head_dim;
  const int64_t k_col = a.n_heads * Dh, v_col = (a.n_heads + a.n_kv_heads) * Dh;
  Sdpa s = full_sdpa(a);
  s.q = rows_of(qkv, S, 0);
  s.k = rows_of(qkv, S, k_col);
  s.v = rows_of(qkv, S, v_col);
  s.o = rows_of(out, S, 0);
  s.dout = rows_of(dout, S, 0);
  const StagedStats stats(lse, true);
  s.lse = stats_of(stats.packed());
  s.dq = rows_of(dqkv, S, 0);
  s.dk = rows_of(dqkv, S, k_col);
  s.dv = rows_of(dqkv, S, v_col);
  return run_backward(s, qkv.device());
}

bool attention_block_forward_cudnn(const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const AttentionBlockShape& a) {
  const Device device = q.device();
  // cuDNN writes bf16; the partial is f32 (converted below), and lse goes through a packed
  // buffer when its view is not packed (a chunk of the sequence's lse always is not).
  const Tensor o = Tensor::empty({a.batch, a.q_len, a.n_heads * a.head_dim}, DType::BF16, device);
  const StagedStats stats(lse, false);
  Sdpa s = block_sdpa(a);
  s.q = rows_of(q, a.q_len, 0);
  s.k = rows_of(k, a.kv_len, 0);
  s.v = rows_of(v, a.kv_len, 0);
  s.o = rows_of(o, a.q_len, 0);
  s.lse = stats_of(stats.packed());
  if (!run_forward(s, device)) return false;
  attention_cudnn_to_f32(out, o, false);
  stats.finish();
  return true;
}

bool attention_block_backward_cudnn(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionBlockShape& a) {
  const Device device = q.device();
  const Tensor dq_b = Tensor::empty(dq.shape(), DType::BF16, device);
  const Tensor dk_b = Tensor::empty(dk.shape(), DType::BF16, device);
  const Tensor dv_b = Tensor::empty(dv.shape(), DType::BF16, device);
  const StagedStats stats(lse, true);
  Sdpa s = block_sdpa(a);
  s.q = rows_of(q, a.q_len, 0);
  s.k = rows_of(k, a.kv_len, 0);
  s.v = rows_of(v, a.kv_len, 0);
  s.o = rows_of(out, a.q_len, 0);
  s.dout = rows_of(dout, a.q_len, 0);
  s.lse = stats_of(stats.packed());
  s.dq = rows_of(dq_b, a.q_len, 0);
  s.dk = rows_of(dk_b, a.kv_len, 0);
  s.dv = rows_of(dv_b, a.kv_len, 0);
  if (!run_backward(s, device)) return false;
  attention_cudnn_to_f32(dq, dq_b, true);
  attention_cudnn_to_f32(dk, dk_b, true);
  attention_cudnn_to_f32(dv, dv_b, true);
  return true;
}

std::string cudnn_attention_graph_text(const AttentionBlockShape& a, bool backward) {
  const int64_t nq = a.n_heads * a.head_dim, nkv = a.n_kv_heads * a.head_dim;
  char* fake = reinterpret_cast<char*>(uintptr_t{1} << 20);  // 16-byte aligned, never read
  const Rows q{fake, a.q_len * nq, nq}, kv{fake, a.kv_len * 2 * nkv, 2 * nkv};
  Sdpa s = block_sdpa(a);
  s.q = s.o = s.dout = s.dq = q;
  s.k = s.dk = kv;
  s.v = s.dv = Rows{fake + nkv * 2, kv.sb, kv.sr};
  s.lse = {reinterpret_cast<float*>(fake), a.n_heads * a.q_len, a.q_len};
  return (backward ? build_backward(s) : build_forward(s))->graph->describe();
}

std::string cudnn_attention_plans() {
  std::lock_guard lock(plans_mutex);
  std::string text;
  for (const std::string& note : plan_notes) text += note + "\n";
  return text;
}

}  // namespace titan::model
