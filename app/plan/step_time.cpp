#include "app/plan/step_time.h"

#include <algorithm>
#include <cmath>

#include "app/pipeline_plan.h"
#include "app/plan/memory_plan.h"
#include "core/check.h"
#include "model/lora_config.h"
#include "model/ops/attention/attention_backend.h"
#include "parallel/memory_estimate.h"

namespace titan::app::plan {

namespace {

// docs/performance.md, "The H100" (titan_bench, 2026-11-22): Llama 3 8B's block linears at
// T = 8192 tokens, the three bf16 GEMMs' time, and the whole FP8 linear's speed-up over it.
struct MeasuredLinear {
  const char* name;
  double in, out;
  double bf16_ms;
  double speedup[4];  // tensorwise, rowwise, rowwise_with_gw_hp, blockwise
};
constexpr MeasuredLinear kMeasuredLinears[] = {
    {"wqkv", 4096, 6144, 1.601, {1.26, 1.12, 1.17, 1.09}},
    {"wo", 4096, 4096, 1.106, {1.14, 1.05, 1.16, 1.04}},
    {"w13", 4096, 28672, 7.983, {1.54, 1.34, 1.21, 1.23}},
    {"w2", 14336, 4096, 3.712, {1.39, 1.21, 1.12, 1.06}},
};
constexpr double kMeasuredTokens = 8192;
constexpr double kH100Bf16Tflops = 989.4;
// Causal GQA attention, B 1, S 8192, 32 heads, Dh 128, bf16, per backend (model.attention_backend;
// docs/planning.md). Both GPUs have the same 989 TFLOP/s bf16 peak, so each rate is a share of it.
struct AttentionRates {
  const char* backend;
  double forward_tflops, backward_tflops;
  const char* source;
};
// The native kernels: titan_bench on an H100 (the same page).
constexpr AttentionRates kNativeAttention{
    "native", 293, 221,
    "causal GQA attention, S 8192, Dh 128: titan_bench on an H100, docs/performance.md"};
// cuDNN: until titan_bench has measured titan's own cuDNN backend, PyTorch 2.11's SDPA on cuDNN 9
// at the same shape on an H200 (2026-11-28), the rate cuDNN's engines reach.
constexpr AttentionRates kCudnnAttention{
    "cuDNN", 596, 484,
    "cuDNN's fused attention, S 8192, Dh 128: PyTorch SDPA on cuDNN 9 on an H200 (titan's own "
    "cuDNN backend not measured yet), docs/planning.md"};

// The backend a GPU run would choose: auto plans cuDNN where this build has it and it takes the
// shape (assuming libcudnn loads on the target, which the plan cannot see).
const AttentionRates& attention_rates(const JobConfig& c, const model::AttentionShape& shape) {
  if (c.model.attention_backend == model::AttentionBackend::Native ||
      c.model.attention_mask == model::AttentionMaskKind::BlockCausal) {
    return kNativeAttention;  // block_causal runs on the native kernels
  }
  // The Hopper forward has not run on a GPU yet: planned at the native rates until titan_bench
  // has measured it (its backward is the native one).
  if (c.model.attention_backend == model::AttentionBackend::Hopper) return kNativeAttention;
  if (!model::cudnn_attention_compiled() || !model::cudnn_attention_refusal(shape).empty()) {
    return kNativeAttention;
  }
  return kCudnnAttention;
}
constexpr double kH100CopyGbs = 2990, kH100HbmGbs = 3350;  // measured copy; the datasheet's
// NCCL's bus bandwidth against a link's rate: assumed, this project has not measured NCCL.
constexpr double kLinkEfficiency = 0.8;

double bf16_gemm_efficiency() {
  double flops = 0, ms = 0;
  for (const MeasuredLinear& l : kMeasuredLinears) {
    flops += 6 * kMeasuredTokens * l.in * l.out;
    ms += l.bf16_ms;
  }
  return flops / (ms * 1e-3) / (kH100Bf16Tflops * 1e12);
}

double d(int64_t v) { return static_cast<double>(v); }

std::string percent(double share) { return detail::concat(std::round(share * 1000) / 10, "%"); }

}  // namespace

double float8_linear_speedup(fp8::RecipeKind recipe) {
  const auto r = static_cast<size_t>(recipe);
  double bf16 = 0, fp8 = 0;
  for (const MeasuredLinear& l : kMeasuredLinears) {
    bf16 += l.bf16_ms;
    fp8 += l.bf16_ms / l.speedup[r];
  }
  return bf16 / fp8;
}

StepTime estimate_step_time(const PlanJob& job, const DeviceSpec& device) {
  const JobConfig& c = job.config;
  const model::ModelArgs& a = job.args;
  const PlanMesh& m = job.mesh;
  const parallel::ParallelMemoryOptions options = parallel_memory_options(job, device.cuda);
  const parallel::ParallelLayout layout = parallel::parallel_layout(a, options);
  StepTime st;

  const double e = static_cast<double>(dtype_size(options.compute_dtype));
  const double B = d(c.training.local_batch_size), S = d(c.training.seq_len) / d(m.cp);
  const double BS = B * S, rows = BS / d(m.tp);
  const double D = d(a.dim), Dh = d(a.head_dim());
  const double H = d(a.n_heads) / d(m.tp), Hkv = d(a.n_kv_heads) / d(m.tp);
  const double F = d(a.ffn_dim) / d(m.tp), V = d(a.vocab_size) / d(m.tp);
  const double micro = d(job.accumulation);
  const double layers = d(a.n_layers) / d(m.pp);

  // Rates.
  const double gemm_eff = device.cuda ? bf16_gemm_efficiency() : 1.0;
  const double gemm_rate = device.bf16_tflops * 1e12 * gemm_eff;
  const AttentionRates& attn =
      attention_rates(c, {c.training.local_batch_size, c.training.seq_len / m.cp, a.n_heads / m.tp,
                          a.n_kv_heads / m.tp, a.head_dim()});
  const double fwd_attn_rate =
      device.cuda ? device.bf16_tflops * 1e12 * attn.forward_tflops / kH100Bf16Tflops : gemm_rate;
  const double bwd_attn_rate =
      device.cuda ? device.bf16_tflops * 1e12 * attn.backward_tflops / kH100Bf16Tflops : gemm_rate;
  const double copy_rate = device.hbm_gbs * 1e9 * (device.cuda ? kH100CopyGbs / kH100HbmGbs : 1);
  const double fp8_speedup = c.float8.enabled ? float8_linear_speedup(c.float8.recipe) : 1.0;
  if (device.cuda) {
    st.assumptions.push_back(
        {detail::concat("bf16 GEMMs at ", percent(gemm_eff), " of the bf16 peak (",
                        std::round(gemm_eff * kH100Bf16Tflops), " TFLOP/s on an H100)"),
         "Llama 3 8B's block linears, three GEMMs each at T 8192: titan_bench on an H100, "
         "docs/performance.md"});
    st.assumptions.push_back(
        {detail::concat("attention (", attn.backend, ") forward at ",
                        percent(attn.forward_tflops / kH100Bf16Tflops), " and backward at ",
                        percent(attn.backward_tflops / kH100Bf16Tflops),
                        " of the bf16 peak, FlashAttention's causal FLOP count"),
         attn.source});
    st.assumptions.push_back(
        {detail::concat("element-wise work at ", percent(kH100CopyGbs / kH100HbmGbs),
                        " of the memory bandwidth"),
         "the 1 GiB device-to-device copy, 2990 GB/s of 3350: titan_bench on an H100"});
    if (c.float8.enabled) {
      st.assumptions.push_back(
          {detail::concat("an FP8 ", fp8::recipe_name(c.float8.recipe), " linear ",
                          std::round(fp8_speedup * 1000) / 1000,
                          "× as fast as bf16, quantization included"),
           "the whole-linear table of docs/performance.md (8B block linears at T 8192, weighted "
           "by their bf16 time)"});
    }
    st.assumptions.push_back({detail::concat("links at ", percent(kLinkEfficiency),
                                             " of their rate; a mesh dim inside a node of ",
                                             device.devices_per_node, " uses NVLink"),
                              "assumed: this project has not measured NCCL"});
  } else {
    st.assumptions.push_back(
        {detail::concat("GEMMs and attention at ", device.bf16_tflops * 1000,
                        " GFLOP/s, element-wise work at ", device.hbm_gbs, " GB/s"),
         "the device table below"});
  }

  // Linears: 6 FLOPs per weight and token (three GEMMs), plus 2 for each recomputed forward.
  // LoRA freezes every weight: no grad-weight GEMM (4 FLOPs), and each adapter adds its own
  // small GEMMs in high precision (model/lora.h): forward x·Aᵀ and u·Bᵀ, 2·r·(P·in + out) a
  // token, and backward three times that (dy·B, v·A, and both factors' gradients from x·Aᵀ and
  // dy·B formed again).
  const bool lora = a.lora.enabled();
  const double gemms_per_linear = lora ? 2 : 3;
  double block_linear_flops = 0, head_linear_flops = 0, block_fp8_share = 0, adapter_fwd_flops = 0;
  for (const auto& [fqn, l] : layout.linears) {
    const double per_token = d(l.weight.out) * d(l.weight.in);
    const double flops = 2 * BS * per_token;  // one GEMM
    if (fqn == "output") {
      head_linear_flops += gemms_per_linear * flops;
    } else {
      block_linear_flops += gemms_per_linear * flops;
      if (l.float8) block_fp8_share += gemms_per_linear * flops;
      const std::string name = fqn.substr(fqn.rfind('.') + 1);
      if (lora && a.lora.targets_linear(name)) {
        adapter_fwd_flops += 2 * BS * d(a.lora.rank) *
                             (d(model::lora_target_parts(name)) * d(l.weight.in) + d(l.weight.out));
      }
    }
  }
  block_linear_flops *= layers / d(a.n_layers);
  block_fp8_share *= layers / d(a.n_layers);
  adapter_fwd_flops *= layers / d(a.n_layers);
  double recomputed_blocks = 0, op_blocks = 0;
  for (int i = 0; i < a.n_layers; ++i) {
    const model::BlockRecompute r = job.ac.for_block(i);
    recomputed_blocks += r == model::BlockRecompute::Full ? 1 : 0;
    op_blocks += r == model::BlockRecompute::Op ? 1 : 0;
  }
  recomputed_blocks *= layers / d(a.n_layers);
  op_blocks *= layers / d(a.n_layers);
  const double recompute_flops =
      (block_linear_flops / gemms_per_linear + adapter_fwd_flops) * recomputed_blocks / layers;
  const double adapter_flops = 4 * adapter_fwd_flops;
  const double fp8_share = block_linear_flops > 0 ? block_fp8_share / block_linear_flops : 0;
  const double block_time_factor = (1 - fp8_share) + fp8_share / fp8_speedup;
  const double output_fp8 = layout.linears.at("output").float8 ? 1 / fp8_speedup : 1;
  const double linear_s_micro =
      (block_linear_flops + recompute_flops) * block_time_factor / gemm_rate +
      adapter_flops / gemm_rate + head_linear_flops * output_fp8 / gemm_rate;

  // Attention per block: forward 2·B·S²·H·Dh (causal), backward 2.5×, a recompute's forward.
  // Under cp a rank's S/cp queries see the whole sequence, and the head-tail split gives each
  // rank 1/cp of the causal work: 2·B·(S/cp)·S·H·Dh. Under block_causal the kernels skip the
  // tiles of other documents: S becomes the documents' Σ n²/S (job.attention_keys).
  const double attn_fwd = 2 * B * S * job.attention_keys * H * Dh;
  const double attention_s_micro =
      layers * (attn_fwd / fwd_attn_rate * (1 + recomputed_blocks / layers) +
                2.5 * attn_fwd / bwd_attn_rate);
  st.hardware_flops =
      micro * (block_linear_flops + recompute_flops + adapter_flops + head_linear_flops +
               layers * (attn_fwd * (3.5 + recomputed_blocks / layers)));
  st.model_flops =
      micro * BS / d(m.tp) * model::training_flops_per_token(a, job.attention_keys) / d(m.pp);
  if (c.model.attention_mask == model::AttentionMaskKind::BlockCausal) {
    st.assumptions.push_back(
        {detail::concat("attention FLOPs (and MFU's) over ", std::round(job.attention_keys),
                        " keys a token of ", c.training.seq_len, ", its document's mean length"),
         job.attention_keys_source});
  }

  // Element-wise bytes per block: two norms (read x, write xn), two residual adds (read two,
  // write one), RoPE on q and k (read and write), SwiGLU (read 2F, write F); backward twice
  // forward; a full recompute one more forward, op's its norms and SwiGLU.
  const double norms = 2 * 2 * rows * D * e, adds = 2 * 3 * rows * D * e;
  const double rope = 2 * BS * (H + Hkv) * Dh * e, swiglu = 3 * BS * F * e;
  const double block_fwd = norms + adds + rope + swiglu;
  double elementwise =
      layers * 3 * block_fwd + recomputed_blocks * block_fwd + op_blocks * (norms + swiglu);
  // The head: its norm, and the loss's four passes over the logits [B·S, V].
  elementwise += 3 * 2 * rows * D * e + 4 * BS * V * e;
  // FSDP: each gather casts the shards into the send buffer and copies the gathered rows out;
  // each reduce-scatter packs the fp32 gradients and adds the result into the shard's.
  // Gathers move every weight; reductions, the optimizer and the all-reduce only the trained.
  double local_numel = 0, shard_numel = 0, gathered_bytes = 0, trained_local = 0, trained_shard = 0;
  for (const parallel::ParamGroupLayout& g : layout.groups) {
    for (const parallel::ParamLayout& p : g.params) {
      const double local = d(p.rows) * d(p.cols);
      const double shard =
          d((p.rows + options.shard_degree() - 1) / options.shard_degree()) * d(p.cols);
      local_numel += local;
      gathered_bytes += local * (p.coded ? 1 : e);  // the float8 all-gather: e4m3
      shard_numel += shard;
      if (p.trained) {
        trained_local += local;
        trained_shard += shard;
      }
    }
  }
  local_numel /= d(m.pp);
  shard_numel /= d(m.pp);
  gathered_bytes /= d(m.pp);
  trained_local /= d(m.pp);
  trained_shard /= d(m.pp);
  const bool fsdp = options.shard_degree() > 1;
  // Per micro-step, how often each group is gathered and reduce-scattered. Under pipeline
  // parallelism a stage runs its groups once per pipeline microbatch, gathered for each forward
  // and each backward; its gradients are reduced after each microbatch or once
  // (parallelism.pipeline_parallel_gradient_reduction).
  const double stage_passes = m.pp > 1 ? d(plan_pipeline(c, a).microbatches()) : 1;
  const double gathers = stage_passes * (c.parallelism.reshard_after_forward ? 2 : 1);
  const double reductions = m.pp > 1 && c.parallelism.pipeline_parallel_gradient_reduction ==
                                            parallel::PipelineGradientReduction::Step
                                ? 1
                                : stage_passes;
  if (fsdp) {
    elementwise +=
        gathers * (shard_numel * (4 + e) + 2 * local_numel * e) + reductions * 3 * trained_local * 4;
  }
  const double elementwise_s_micro = elementwise / copy_rate;
  // The optimizer step: AdamW reads the parameter, gradient and two moments and writes three
  // (28 B), the gradient norm reads the gradients (4), clipping rewrites them (8), zero_grad
  // writes them (4); replicated mixed precision casts the bf16 working copy (6).
  const bool working_copy = !fsdp && options.compute_dtype != DType::F32;
  st.optimizer_s =
      (fsdp ? trained_shard : trained_local) * (44 + (working_copy ? 6 : 0)) / copy_rate;

  // Communication, bytes one rank sends, ring collectives: an all-gather or reduce-scatter of
  // N bytes over n ranks sends (n − 1)/n · N; an all-reduce twice that.
  auto ring = [](double n) { return n > 1 ? (n - 1) / n : 0.0; };
  const double node = d(device.devices_per_node);
  auto link = [&](bool intra) {
    return (intra ? device.intra_node_gbs : device.inter_node_gbs) * 1e9 * kLinkEfficiency;
  };
  double fsdp_s = 0, tp_s = 0, allreduce_s = 0;
  if (fsdp) {
    const double n = d(options.shard_degree());
    const bool intra = d(m.tp) * n <= node;
    const double gathered = micro * gathers * gathered_bytes * ring(n);
    const double reduced = micro * reductions * trained_local * 4 * ring(n);
    MeshDimBytes dim{m.cp > 1 ? parallel::kDpShardCp : parallel::MeshDim::DpShard,
                     gathered + reduced, 0, intra};
    dim.seconds = dim.bytes / link(intra);
    fsdp_s = dim.seconds;
    st.comm.push_back(dim);
  }
  if (m.dp_replicate > 1) {
    const double n = d(m.dp_replicate);
    const bool intra = d(m.world()) <= node;
    MeshDimBytes dim{parallel::MeshDim::DpReplicate,
                     2 * ring(n) * (fsdp ? trained_shard : trained_local) * 4, 0, intra};
    dim.seconds = dim.bytes / link(intra);
    allreduce_s = dim.seconds;
    st.comm.push_back(dim);
  }
  if (m.tp > 1) {
    // Per block: forward gathers x twice (wqkv, w13) and reduce-scatters twice (wo, w2);
    // backward gathers and reduce-scatters for the column linears and gathers dy for the row
    // linears; a full recompute repeats the forward's. The embedding and the head: one each way.
    const double unit = ring(d(m.tp)) * BS * D * e;
    // A split backward's W gathers x (wqkv, w13) and dy (wo, w2) again (weight_grad_queue.h).
    const bool regathers =
        m.pp > 1 && parallel::pipeline::splits_backward(c.parallelism.pipeline_parallel_schedule);
    const double per_block = 4 + 6 + (regathers ? 4 : 0);
    const double bytes = micro * unit * (layers * per_block + recomputed_blocks * 4 + 4);
    const bool intra = d(m.tp) <= node;
    MeshDimBytes dim{parallel::MeshDim::Tp, bytes, 0, intra};
    dim.seconds = bytes / link(intra);
    tp_s = dim.seconds;
    st.comm.push_back(dim);
  }
  double cp_s = 0;
  const bool cp_ring = c.parallelism.context_parallel_comm == parallel::CpRotateMethod::Ring;
  if (m.cp > 1) {
    // Per block (parallel/context_parallel.cpp): the ring passes this rank's K/V
    // [B·S/cp, 2·Hkv·Dh] on cp − 1 hops in the forward, again in a full recompute's and in the
    // backward, and dK/dV (f32 on CUDA) on cp hops; the all-gather sends as much K/V and
    // reduce-scatters dK/dV, (cp − 1) chunks of it.
    const double kv = BS * 2 * Hkv * Dh, hops = d(m.cp) - 1;
    const double dkv_hops = cp_ring ? d(m.cp) : hops;
    const double per_block = 2 * hops * kv * e + dkv_hops * kv * (device.cuda ? 4 : e);
    const double bytes = micro * (layers * per_block + recomputed_blocks * hops * kv * e);
    const bool intra = d(m.cp) * d(m.tp) <= node;
    MeshDimBytes dim{parallel::MeshDim::Cp, bytes, 0, intra};
    dim.seconds = bytes / link(intra);
    cp_s = dim.seconds;
    st.comm.push_back(dim);
  }
  const double compute_micro = linear_s_micro + attention_s_micro + elementwise_s_micro;
  st.linear_s = micro * linear_s_micro;
  st.attention_s = micro * attention_s_micro;
  st.elementwise_s = micro * elementwise_s_micro;
  const double compute = micro * compute_micro;
  // FSDP's gathers and reduce-scatters run behind the blocks' compute (the prefetch); the first
  // gather of each pass over a rank's groups is not hidden. Async TP hides its ring behind the
  // linears; synchronous TP waits for every transfer. The DDP and HSDP all-reduces follow the
  // backward.
  double exposed = 0;
  if (fsdp) {
    const double groups = d(layout.groups.size()) / d(m.pp);  // a rank's, about
    exposed += std::max(0.0, fsdp_s - compute) + fsdp_s / groups;
  }
  if (m.tp > 1) {
    exposed += options.async_tensor_parallel ? std::max(0.0, tp_s - st.linear_s) : tp_s;
  }
  // The ring's transfers run behind the attention of the K/V in hand; the all-gather's are
  // waited for before it.
  if (m.cp > 1) {
    exposed += cp_ring ? std::max(0.0, cp_s - st.attention_s) : cp_s;
  }
  exposed += allreduce_s;
  st.comm_exposed_s = exposed;
  if (m.pp > 1) {
    // The schedule's own bubble, from its simulator (forward 1, backward 2 time units), and the
    // stage boundaries: each micro-batch's [B·S/tp, D] activation forward and its gradient back,
    // sent while other micro-batches compute (receives are posted ahead).
    const PipelinePlan pipe = plan_pipeline(c, a);
    st.pipeline_bubble = pipe.simulation.bubble;
    const double stages = d(pipe.stages.size()) / d(m.pp);
    MeshDimBytes dim{parallel::MeshDim::Pp,
                     micro * d(c.training.local_batch_size) * S / d(m.tp) * D * e * 2 * stages, 0,
                     d(m.world()) <= node};
    dim.seconds = dim.bytes / link(dim.intra_node);
    st.comm.push_back(dim);
    st.assumptions.push_back(
        {"pipeline bubble from the schedule's simulator (forward 1, "
         "backward 2), stage transfers hidden behind compute",
         "parallel/pipeline/schedule_simulator.h"});
  }
  st.step_s = (compute + exposed + st.optimizer_s) / (1 - st.pipeline_bubble);
  const double tokens = d(job.global_batch) * d(c.training.seq_len);
  st.tokens_per_s = tokens / st.step_s;
  st.tokens_per_s_per_device = st.tokens_per_s / d(m.world());
  if (device.cuda) {
    st.mfu = model::training_flops_per_token(a, job.attention_keys) * st.tokens_per_s_per_device /
             (device.bf16_tflops * 1e12);
  }
  return st;
}

}  // namespace titan::app::plan
