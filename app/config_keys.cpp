#include "app/config_keys.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "app/config_yaml.h"
#include "app/yaml_document.h"
#include "checkpoint/export_dtype.h"
#include "core/check.h"
#include "core/unverified_gpu_paths.h"
#include "model/config.h"

namespace titan::app {

namespace {

// The shapes most single-key checks take; each message names the key, the value and the fix.

// "<key>: must be positive, got 0; <fix>"
template <typename T>
KeyCheck<T> positive(std::string fix) {
  return [fix](const std::string& key, const T& v) {
    if (!(v > 0)) input_error(key, ": must be positive, got ", v, "; ", fix);
  };
}

// "<key>: must be 0 (<zero_means>) or positive, got -1[; <fix>]"
template <typename T>
KeyCheck<T> zero_or_positive(std::string zero_means = "", std::string fix = "") {
  return [zero_means, fix](const std::string& key, const T& v) {
    if (v < 0) {
      input_error(key, ": must be 0", zero_means.empty() ? "" : " (" + zero_means + ")",
                  " or positive, got ", v, fix.empty() ? "" : "; " + fix);
    }
  };
}

// "<key>: must be positive or -1 (<minus_one_means>), got 0"
KeyCheck<int64_t> positive_or_minus_one(std::string minus_one_means) {
  return [minus_one_means](const std::string& key, const int64_t& v) {
    if (v != -1 && v <= 0) {
      input_error(key, ": must be positive or -1 (", minus_one_means, "), got ", v);
    }
  };
}

// "<key>: must be in [0, 1), got 1; <fix>"
KeyCheck<double> below_one(std::string fix) {
  return [fix](const std::string& key, const double& v) {
    if (!(v >= 0 && v < 1)) input_error(key, ": must be in [0, 1), got ", v, "; ", fix);
  };
}

std::string joined(const std::vector<std::string>& names) {
  std::vector<std::string_view> views(names.begin(), names.end());
  return list_alternatives(views);
}

}  // namespace

ConfigKey::ConfigKey(std::string section, std::string name, Device* field, std::string help)
    : section(std::move(section)),
      name(std::move(name)),
      help(std::move(help)),
      value(ChoiceRef{
          "device", std::vector<std::string_view>(std::begin(kDeviceForms), std::end(kDeviceForms)),
          [field](std::string_view text, const std::string& key) {
            *field = parse_device_setting(text, key);
          },
          [field] { return field->str(); }}) {}

namespace {

// A source's name becomes a metric's (source_tokens/<name>, val_loss/<name>): a word.
bool plain_source_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char ch) {
    return std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.';
  });
}

void check_source_list(const std::string& key, const SourceListRef& ref) {
  std::set<std::string> names;
  for (size_t i = 0; i < ref.list->size(); ++i) {
    const SourceEntry& e = (*ref.list)[i];
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (!plain_source_name(e.name)) {
      input_error(at, ".name: '", e.name,
                  "' is not a name of letters, digits, '_', '-' or '.'; give each source a short "
                  "name such as web or code (it names the source's metrics)");
    }
    if (!names.insert(e.name).second) {
      input_error(at, ".name: '", e.name, "' names two sources of ", key,
                  "; give each source its own name");
    }
    if (e.path.empty()) input_error(at, ".path: is empty; name the source's data");
    if (ref.weighted && !(std::isfinite(e.weight) && e.weight > 0)) {
      input_error(at, ".weight: must be positive and finite, got ", e.weight, "; give source '",
                  e.name, "' a positive weight (its share of the windows), or remove the source");
    }
  }
}

}  // namespace

ConfigKey::ConfigKey(std::string section, std::string name, SourceListRef field, std::string help)
    : section(std::move(section)), name(std::move(name)), help(std::move(help)), value(field) {
  check = [field, path = path()] { check_source_list(path, field); };
}

namespace {

void check_param_group_list(const std::string& key,
                            const std::vector<model::ParamGroupRule>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const model::ParamGroupRule& rule = groups[g];
    const std::string at = key + "[" + std::to_string(g) + "]";
    if (rule.match.empty()) {
      input_error(at, ".match: is empty; give a regex of parameter names, such as \"norm\"");
    }
    try {
      const std::regex compiled(rule.match, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      input_error(at, ".match: '", rule.match, "' is not a regex (", e.what(),
                  "); write an ECMAScript regex such as \"norm\" or \"^layers\\.0\\.\"");
    }
    if (!(std::isfinite(rule.lr_scale) && rule.lr_scale > 0)) {
      input_error(at, ".lr_scale: must be positive and finite, got ", rule.lr_scale,
                  "; e.g. 1 for optimizer.lr itself");
    }
    if (rule.weight_decay && !(std::isfinite(*rule.weight_decay) && *rule.weight_decay >= 0)) {
      input_error(at, ".weight_decay: must be zero or positive, got ", *rule.weight_decay,
                  "; 0 turns decay off for the group");
    }
  }
}

}  // namespace

std::vector<ConfigKey> config_keys(JobConfig& c) {
  return {
      {"job", "description", &c.job.description, "Free text shown at start-up."},
      {"job", "dump_folder", &c.job.dump_folder,
       "Folder for the job's outputs: the checkpoint, TensorBoard, trace and memory-snapshot "
       "folders go under it."},

      {"model", "name", &c.model.name, "Model family. Only llama3.",
       [](const std::string& key, const std::string& v) {
         if (v != "llama3")
           input_error(key, ": unknown model '", v, "'; titan_train trains llama3");
       }},
      {"model", "flavor", &c.model.flavor,
       "Named size: " + joined(model::model_flavor_names()) + ".",
       [](const std::string&, const std::string& v) {
         model::model_flavor(v);  // InputError naming model.flavor and the flavors there are
       }},
      {"model", "dim", &c.model.dim, "Override of the model dim D; 0 keeps the flavor's.",
       zero_or_positive<int64_t>("the flavor's value")},
      {"model", "n_layers", &c.model.n_layers,
       "Override of the number of blocks L; 0 keeps the flavor's.",
       zero_or_positive<int64_t>("the flavor's value")},
      {"model", "n_heads", &c.model.n_heads,
       "Override of the attention heads H (must divide dim); 0 keeps the flavor's.",
       zero_or_positive<int64_t>("the flavor's value")},
      {"model", "n_kv_heads", &c.model.n_kv_heads,
       "Override of the key/value heads Hkv (must divide n_heads); 0 keeps the flavor's.",
       zero_or_positive<int64_t>("the flavor's value")},
      {"model", "ffn_dim", &c.model.ffn_dim,
       "Override of the SwiGLU hidden size F; 0 keeps the flavor's.",
       zero_or_positive<int64_t>("the flavor's value")},
      {"model", "vocab_size", &c.model.vocab_size,
       "Override of the vocabulary size V; 0 keeps the flavor's. The data's tokenizer must fit in "
       "it.",
       zero_or_positive<int64_t>("the flavor's value")},
      {"model", "hf_assets_path", &c.model.hf_assets_path,
       "A folder holding the model's Hugging Face tokenizer.json (torchtitan's key): text data is "
       "tokenized with it unless data.tokenizer_path says otherwise."},
      {"model", "attention_backend", &c.model.attention_backend, model::kAttentionBackends,
       "What runs attention on a GPU: cudnn (cuDNN 9's fused flash attention; only a GPU run "
       "loads libcudnn.so.9, and docs/cuda.md says where it is looked for), native (the "
       "FlashAttention-2 kernels of model/ops/attention/attention.cu), hopper (opt-in, not yet "
       "run on a GPU: the wgmma/TMA forward of model/ops/attention/attention_hopper.cu with the "
       "native backward; sm_90a builds on a Hopper GPU, Dh 64 or 128, causal, no context "
       "parallelism), or auto: cuDNN where it loads and takes the model's shape, else native, "
       "said once in the log. The CPU runs its own."},
      {"model", "attention_mask", &c.model.attention_mask, model::kAttentionMasks,
       "Which keys a token attends to (torchtitan's names): causal, every earlier token of its "
       "window; or block_causal, Llama 3's document mask: only the earlier tokens of its own "
       "document, a document ending at the tokenizer's EOS (docs/data.md#documents). Validation "
       "uses the same mask. block_causal runs on the native kernels on a GPU."},
      {"model", "norm_eps", &c.model.norm_eps, "RMSNorm epsilon."},
      {"model", "rope_theta", &c.model.rope_theta, "RoPE base frequency."},
      {"model", "rope_scaling", &c.model.rope_scaling,
       "Llama 3.1 RoPE frequency scaling (factor 8, original context 8192; the Llama 3.2 "
       "flavors' factor 32)."},
      {"model", "tie_word_embeddings", &c.model.tie_word_embeddings,
       "One weight for the token embedding and the output projection (Hugging Face's name); "
       "the Llama 3.2 flavors are tied whatever this says. Checkpoints and Hugging Face "
       "folders record it, and a tied one does not load into an untied model, nor the reverse."},

      {"optimizer", "name", &c.optimizer.name,
       "AdamW, or Muon: Muon on the blocks' weight matrices (wqkv, wo, w13, w2) and AdamW on the "
       "embedding, the output and the norms (docs/optimizers.md).",
       [](const std::string& key, const std::string& v) {
         if (v != "AdamW" && v != "Muon") {
           input_error(key, ": unknown optimizer '", v, "'; use AdamW or Muon");
         }
       }},
      {"optimizer", "lr", &c.optimizer.lr, "Peak learning rate.", positive<double>("e.g. 8e-4")},
      {"optimizer", "beta1", &c.optimizer.beta1, "AdamW beta1.", below_one("e.g. 0.9")},
      {"optimizer", "beta2", &c.optimizer.beta2, "AdamW beta2.", below_one("e.g. 0.95")},
      {"optimizer", "eps", &c.optimizer.eps, "AdamW epsilon.", positive<double>("e.g. 1e-8")},
      {"optimizer", "weight_decay", &c.optimizer.weight_decay,
       "Decoupled weight decay, applied to every parameter (as torchtitan).",
       zero_or_positive<double>()},
      {"optimizer", "groups", &c.optimizer.groups,
       "Per-parameter learning-rate scale and weight decay: a list of {match, lr_scale, "
       "weight_decay}, match an ECMAScript regex searched for in each parameter's checkpoint name "
       "(norm.weight, layers.0.attention.wqkv.weight, tok_embeddings.weight); the first group "
       "that matches takes the parameter, the others keep optimizer.lr and weight_decay. A group "
       "matching no parameter is refused (docs/optimizers.md).",
       [](const std::string& key, const std::vector<model::ParamGroupRule>& groups) {
         check_param_group_list(key, groups);
       }},
      {"optimizer", "state_dtype", &c.optimizer.state_dtype, model::kOptimizerStateDtypes,
       "The dtype of AdamW's two moments and Muon's momentum: float32, or bfloat16 (half the "
       "optimizer's memory; each update computed in f32 and stored rounded to nearest, the "
       "master weights still f32). A checkpoint resumes into either."},
      {"optimizer", "muon_momentum", &c.optimizer.muon_momentum,
       "Muon's momentum coefficient (optimizer.name Muon).", below_one("e.g. 0.95")},
      {"optimizer", "muon_nesterov", &c.optimizer.muon_nesterov,
       "Muon orthogonalises the Nesterov update (1-momentum)*grad + momentum*buffer; false: the "
       "momentum buffer itself."},
      {"optimizer", "muon_ns_steps", &c.optimizer.muon_ns_steps,
       "Newton-Schulz iterations that orthogonalise each Muon update.",
       positive<int64_t>("e.g. 5")},
      {"optimizer", "muon_scale", &c.optimizer.muon_scale, model::kMuonScales,
       "What multiplies Muon's orthogonalised update: match_adamw, 0.2*sqrt(max(rows, cols)), "
       "the RMS of AdamW's update, so optimizer.lr and weight_decay serve both optimizers; or "
       "shape, sqrt(max(1, rows/cols)) as Jordan's reference, which wants a larger rate for the "
       "matrices (an optimizer.groups lr_scale)."},

      {"lr_scheduler", "warmup_steps", &c.lr_scheduler.warmup_steps,
       "Steps of linear warmup from lr/(warmup+1) to lr.", zero_or_positive<int64_t>()},
      {"lr_scheduler", "decay_ratio", &c.lr_scheduler.decay_ratio,
       "Fraction of all steps spent decaying at the end; the steps between warmup and decay hold "
       "lr. null: decay over every step after warmup.",
       [](const std::string& key, const std::optional<double>& v) {
         if (v && !(*v >= 0 && *v <= 1)) input_error(key, ": must be in [0, 1] or null, got ", *v);
       }},
      {"lr_scheduler", "decay_type", &c.lr_scheduler.decay_type, model::kDecayTypes,
       "Shape of the decay over its progress p from 0 to 1: linear 1 − p, sqrt 1 − √p, cosine "
       "(1 + cos πp)/2, scaled between lr and lr · min_lr_factor."},
      {"lr_scheduler", "min_lr_factor", &c.lr_scheduler.min_lr_factor,
       "Floor of the decay, as a fraction of lr.",
       [](const std::string& key, const double& v) {
         if (!(v >= 0 && v <= 1)) input_error(key, ": must be in [0, 1], got ", v);
       }},

      {"training", "steps", &c.training.steps, "Optimizer steps to train.",
       positive<int64_t>("set the number of optimizer steps, e.g. 200")},
      {"training", "seed", &c.training.seed, "Seed of parameter initialisation and data order.",
       zero_or_positive<int64_t>()},
      {"training", "local_batch_size", &c.training.local_batch_size,
       "Sequences per data-parallel rank per micro-step.",
       positive<int64_t>("e.g. 8 sequences per rank")},
      {"training", "global_batch_size", &c.training.global_batch_size,
       "Sequences per optimizer step over all data-parallel ranks; a multiple of local_batch_size "
       "× dp, larger means gradient accumulation. -1: local_batch_size × dp.",
       positive_or_minus_one("local_batch_size × dp")},
      {"training", "seq_len", &c.training.seq_len, "Tokens per sequence S.",
       positive<int64_t>("e.g. 2048 tokens")},
      {"training", "device", &c.training.device,
       "cpu; cuda: one GPU per rank, its node-local rank's (of the GPUs CUDA_VISIBLE_DEVICES "
       "leaves); cuda:N: GPU N for every rank, which ranks may share with comm_backend mpi. "
       "CUDA needs a build with the CUDA backend and a usable GPU."},
      {"training", "mixed_precision_param", &c.training.mixed_precision_param,
       parallel::kParamPrecisions,
       "The dtype parameters compute in, over fp32 master weights, moments and gradient "
       "reductions. bfloat16 on CUDA: bf16 parameters for compute and all-gather (torchtitan's "
       "FSDP2 default). bfloat16 on the CPU: the linears' GEMM operands only (an emulation: "
       "rounded to bf16, fp32 accumulation). float32: the CPU only. auto: bfloat16 on CUDA, "
       "float32 on the CPU."},
      {"training", "max_norm", &c.training.max_norm,
       "Clip the global gradient norm to this; 0 disables clipping.",
       zero_or_positive<double>("no clipping")},
      {"training", "skip_nonfinite_steps", &c.training.skip_nonfinite_steps,
       "Steps whose loss or gradient norm is NaN or Inf that the run may skip (the optimizer "
       "step not taken, the weights and optimizer state unchanged, no checkpoint of that step "
       "written), each with a warning, before it stops with exit code 3. 0: stop at the first.",
       [](const std::string& key, const int64_t& v) {
         if (v < 0) {
           input_error(key,
                       ": must be 0 (stop at the first NaN/Inf step) or the number of such steps "
                       "to skip, got ",
                       v);
         }
       }},

      {"parallelism", "pipeline_parallel_degree", &c.parallelism.pipeline_parallel_degree,
       "Pipeline stages pp (the outermost mesh dim, so stages cross nodes): the layers are split "
       "into pp × stages-per-rank stages, each rank of a pp group running its stages' part of "
       "every microbatch.",
       positive<int64_t>("1 (no pipeline) or the number of pipeline ranks")},
      {"parallelism", "dp_replicate", &c.parallelism.dp_replicate,
       "Data-parallel replicas (DDP / HSDP)."},
      {"parallelism", "dp_shard", &c.parallelism.dp_shard,
       "FSDP shards; -1 takes the rest of the world size."},
      {"parallelism", "context_parallel_degree", &c.parallelism.context_parallel_degree,
       "Context-parallel degree cp (the mesh dim between dp_shard and tp): each sequence is cut "
       "into 2·cp chunks and cp rank r holds chunks r and 2·cp − 1 − r (head-tail, for causal "
       "balance); attention meets the other ranks' keys and values through "
       "context_parallel_comm. training.seq_len (and validation.seq_len) must be a multiple of "
       "2·cp. FSDP shards over dp_shard × cp."},
      {"parallelism", "context_parallel_comm", &c.parallelism.context_parallel_comm,
       parallel::kCpRotateMethods,
       "How keys and values reach the other cp ranks (torchtitan: context_parallel_rotate_method): "
       "ring (each rank's K/V pass around the cp ring, each step's transfer overlapped with the "
       "attention of the K/V in hand; dK/dV travel back the same way) or allgather (every rank's "
       "K/V gathered at once, nothing overlapped: the reference)."},
      {"parallelism", "tp", &c.parallelism.tp, "Tensor-parallel degree (innermost mesh dim)."},
      {"parallelism", "pipeline_parallel_schedule", &c.parallelism.pipeline_parallel_schedule,
       parallel::pipeline::kScheduleKindNames,
       "The pipeline schedule (torch.distributed.pipelining's names): GPipe (every forward, then "
       "every backward: holds all microbatches), 1F1B (at most pp in flight), Interleaved1F1B "
       "(several looped stages per rank: a smaller bubble), InterleavedZeroBubble and "
       "ZBVZeroBubble (the backward split into input and weight gradients, the weight "
       "gradients filling the bubble; ZBV places two stages per rank in a V)."},
      {"parallelism", "pipeline_parallel_microbatch_size",
       &c.parallelism.pipeline_parallel_microbatch_size,
       "Sequences per pipeline microbatch: training.local_batch_size is split into "
       "local_batch_size / this microbatches, which the schedule runs through the stages.",
       positive<int64_t>("e.g. 1 sequence per microbatch")},
      {"parallelism", "pipeline_parallel_layers_per_stage",
       &c.parallelism.pipeline_parallel_layers_per_stage,
       "Layers per pipeline stage (the embedding and norm + output counting as "
       "first_stage_less_layers and last_stage_less_layers layers); the stage count is then "
       "ceil(effective layers / this), which must be a multiple of pp. -1: one stage per rank "
       "for GPipe and 1F1B, two for the others.",
       positive_or_minus_one("one stage per rank for GPipe and 1F1B, two for the others")},
      {"parallelism", "pipeline_parallel_first_stage_less_layers",
       &c.parallelism.pipeline_parallel_first_stage_less_layers,
       "How many layers the embedding counts as when the layers are dealt out to the stages "
       "(torchtitan's balance rule).",
       zero_or_positive<int64_t>("the embedding weighs nothing")},
      {"parallelism", "pipeline_parallel_last_stage_less_layers",
       &c.parallelism.pipeline_parallel_last_stage_less_layers,
       "How many layers the final norm and output count as when the layers are dealt out to "
       "the stages.",
       zero_or_positive<int64_t>("the output weighs nothing")},
      {"parallelism", "pipeline_parallel_gradient_reduction",
       &c.parallelism.pipeline_parallel_gradient_reduction, parallel::kPipelineGradientReductions,
       "Under pipeline parallelism with FSDP, when a stage's gradients are reduce-scattered into "
       "their fp32 shards: microbatch (each parameter group's after every microbatch's backward, "
       "or its W: one group's unsharded gradients on the rank at a time, m reduce-scatters a "
       "step) or step (summed unsharded in fp32 over the step's microbatches and reduced once: "
       "fewer bytes over dp_shard, but every group of the rank's stages held for the whole "
       "step, 23.6 GiB a rank for Llama 3 405B on pp 8 × tp 8). titan_train --plan prints both."},
      {"parallelism", "reshard_after_forward", &c.parallelism.reshard_after_forward,
       "FSDP: free each block's gathered parameters after its forward and gather them again "
       "for backward (less memory, one more all-gather per block)."},
      {"parallelism", "comm_backend", &c.parallelism.comm_backend, parallel::kCommBackends,
       "What moves tensors between ranks: nccl (CUDA tensors through NCCL on a communication "
       "stream, CPU tensors through MPI; needs training.device cuda), mpi (every tensor through "
       "MPI, CUDA tensors staged through host memory: slow, but ranks may share a GPU), or auto "
       "(nccl when training.device is cuda, mpi when it is cpu)."},
      {"parallelism", "comm_timeout_s", &c.parallelism.comm_timeout_s,
       "Seconds a rank may wait for a collective (MPI: blocked on it, set-up's blocking calls "
       "included; NCCL: since its post) before the backend's watchdog aborts the job, naming "
       "it, its mesh dims and the ranks that had not arrived; also the longest MPI_Finalize "
       "may wait at the exit.",
       [](const std::string& key, const double& v) {
         if (!(v > 0) || !std::isfinite(v)) {
           input_error(key, ": must be a positive number of seconds, got ", v,
                       "; e.g. 600 (seconds before a stuck collective aborts the job)");
         }
       }},
      {"parallelism", "enable_async_tensor_parallel", &c.parallelism.enable_async_tensor_parallel,
       "Async TP: every tensor-parallel all-gather and reduce-scatter of the linears, forward "
       "and backward, runs as tp ring steps overlapped with the GEMM chunks they feed or follow "
       "(the same values as synchronous TP). Needs tp > 1."},

      {"float8", "enabled", &c.float8.enabled, "Train the selected linears in FP8."},
      {"float8", "recipe", &c.float8.recipe, fp8::kRecipeNames,
       "Scaling recipe: tensorwise (one dynamic scale per tensor; e5m2 gradients), rowwise "
       "(power-of-2 scales per row), rowwise_with_gw_hp (rowwise, the weight gradient in high "
       "precision) or blockwise (1×128 activations and gradients, 128×128 weights)."},
      {"float8", "filter_fqns", &c.float8.filter_fqns,
       "Linears kept in high precision: any linear whose name contains one of these strings; a "
       "comma-separated list on the command line."},
      {"float8", "auto_filter_small_kn", &c.float8.auto_filter_small_kn,
       "Keep in high precision, with a warning each, the linears whose FP8 GEMM dims after tp "
       "are not multiples of 16 or too small for FP8 to pay off (instead of an error)."},
      {"float8", "enable_fsdp_float8_all_gather", &c.float8.enable_fsdp_float8_all_gather,
       "FSDP all-gathers the FP8 linears' weights as e4m3 bytes, each shard encoded with the "
       "whole weight's scale. Needs recipe tensorwise; no effect without FSDP (dp_shard 1)."},
      {"float8", "precompute_float8_dynamic_scale_for_fsdp",
       &c.float8.precompute_float8_dynamic_scale_for_fsdp,
       "With the float8 all-gather (which it needs): compute every weight's scale after the "
       "optimizer step in one batched all-reduce, instead of one per gathered block."},

      {"lora", "rank", &c.lora.rank,
       "LoRA fine-tuning (docs/fine_tuning.md#5-lora-adapters-over-a-frozen-model): the rank r "
       "of the low-rank adapters added to the block linears named in lora.targets; every other "
       "weight is frozen (no gradient, no optimizer state) and only the adapters train. 0: off, "
       "every weight trains.",
       zero_or_positive<int64_t>()},
      {"lora", "alpha", &c.lora.alpha,
       "The adapters' output is scaled by alpha / rank (PEFT's lora_alpha)."},
      {"lora", "dropout", &c.lora.dropout,
       "Dropout on the adapters' input: only 0 (none) is implemented."},
      {"lora", "targets", &c.lora.targets,
       "The linears of every block that get adapters, by name: wqkv (q, k and v, one adapter "
       "each), wo, w13 (gate and up, one each), w2; a comma-separated list on the command line."},

      {"activation_checkpoint", "mode", &c.activation_checkpoint.mode,
       model::kActivationCheckpointModes,
       "none (keep every activation), full (keep each block's input and recompute the block in "
       "backward), selective (full every selective_ac_option-th block) or op (keep the GEMM and "
       "attention outputs, recompute the norms and SwiGLU)."},
      {"activation_checkpoint", "selective_ac_option", &c.activation_checkpoint.selective_ac_option,
       "With mode selective: checkpoint every N-th block, or 'op' for op-level recompute."},

      {"checkpoint", "enable", &c.checkpoint.enable,
       "Save checkpoints, and resume from the latest one found."},
      {"checkpoint", "folder", &c.checkpoint.folder, "Checkpoint folder, under job.dump_folder."},
      {"checkpoint", "interval", &c.checkpoint.interval,
       "Save every this many steps (and after the last step).",
       positive<int64_t>("save every N steps, e.g. 500")},
      {"checkpoint", "load_step", &c.checkpoint.load_step,
       "Step to resume from; -1: the latest saved.",
       [](const std::string& key, const int64_t& v) {
         if (v < -1) input_error(key, ": must be -1 (latest) or a saved step, got ", v);
       }},
      {"checkpoint", "async_mode", &c.checkpoint.async_mode, checkpoint::kAsyncModes,
       "disabled (a save blocks training until written), async (state staged to host memory, "
       "written by a background thread while training goes on) or async_with_pinned_mem (the "
       "same, staged into pinned memory on CUDA)."},
      {"checkpoint", "keep_latest_k", &c.checkpoint.keep_latest_k,
       "Keep this many newest complete checkpoints and delete older ones; 0 keeps all.",
       zero_or_positive<int64_t>("keep all", "e.g. 10")},
      {"checkpoint", "initial_load_path", &c.checkpoint.initial_load_path,
       "When checkpoint.folder holds no checkpoint yet: start from this step folder of another "
       "run (or, with initial_load_in_hf, a Hugging Face Llama 3 folder)."},
      {"checkpoint", "initial_load_in_hf", &c.checkpoint.initial_load_in_hf,
       "initial_load_path is a Hugging Face Llama 3 folder (config.json and model*.safetensors)."},
      {"checkpoint", "initial_load_model_only", &c.checkpoint.initial_load_model_only,
       "From initial_load_path take the weights only: optimizer state, step and data position "
       "start fresh."},
      {"checkpoint", "last_save_in_hf", &c.checkpoint.last_save_in_hf,
       "Also write the last step as a Hugging Face Llama 3 folder, hf-step-<N> beside the step "
       "folders."},
      {"checkpoint", "export_dtype", &c.checkpoint.export_dtype, checkpoint::kExportDTypes,
       "The dtype of the weights in Hugging Face exports."},

      {"data", "path", &c.data.path,
       "Training data: a text file (through data.tokenizer_path), a .bin token file, or a folder "
       "or glob (e.g. shards/*.bin) of .bin shards read as one stream in path order."},
      {"data", "format", &c.data.format, data::kTokenFormats,
       "How data.path is read. auto: a folder or a glob is .bin shards, a file ending in .bin a "
       "token file, any other file text. text: one text file. bin: token files, whatever their "
       "extension."},
      {"data", "tokenizer_path", &c.data.tokenizer_path,
       "The tokenizer of text data: byte, or a Hugging Face tokenizer.json or its folder; empty: "
       "model.hf_assets_path when set, else byte. Token files need none."},

      {"data", "sources", SourceListRef{&c.data.sources, true},
       "A mixture in place of data.path: a list of {name, path, weight}, each path anything "
       "data.path takes (read with data.format). Each training window comes from one source, "
       "with probability proportional to its weight, under training.seed; a source that runs "
       "out starts its next epoch. Names are words (metrics report source_tokens/<name>). "
       "Leave data.path at its default or empty."},

      {"validation", "enable", &c.validation.enable,
       "After step 1 and every validation.freq-th step, compute the mean token loss of "
       "validation.steps batches of held-out data, forward only, and report it as val_loss."},
      {"validation", "dataset_path", &c.validation.dataset_path,
       "Held-out data, as data.path takes it (format auto): a text file, a .bin token file, a "
       "folder of .bin shards or a glob of them. Read in order from its start, so every "
       "evaluation sees the same batches."},
      {"validation", "local_batch_size", &c.validation.local_batch_size,
       "Sequences per data-parallel rank per validation batch; -1: training.local_batch_size.",
       positive_or_minus_one("training.local_batch_size")},
      {"validation", "seq_len", &c.validation.seq_len,
       "Tokens per validation sequence; -1: training.seq_len.",
       positive_or_minus_one("training.seq_len")},
      {"validation", "freq", &c.validation.freq, "Validate after step 1 and every freq-th step.",
       positive<int64_t>("validate every N steps, e.g. 10")},
      {"validation", "steps", &c.validation.steps,
       "Batches per evaluation; -1: every whole batch the held-out data holds. More batches "
       "than it holds start again from its first window.",
       positive_or_minus_one("all the held-out data")},
      {"validation", "sources", SourceListRef{&c.validation.sources, false},
       "Several held-out sets in place of validation.dataset_path: a list of {name, path}, each "
       "read as dataset_path is and reported as val_loss/<name>."},

      {"eval", "tasks", &c.eval.tasks,
       "Multiple-choice task files (JSON lines; FORMAT:FILE names the format, else the first "
       "line's fields tell it: hellaswag, arc, piqa, mmlu, plain) scored after step 1 and every "
       "eval.freq-th step as lm-evaluation-harness scores them, reported as eval/<task>/acc and "
       "eval/<task>/acc_norm (a comma-separated list on the command line). Read and encoded "
       "before the model is built; empty: off."},
      {"eval", "freq", &c.eval.freq, "Score eval.tasks after step 1 and every freq-th step.",
       positive<int64_t>("score every N steps, e.g. 100")},
      {"eval", "limit", &c.eval.limit, "Items per task, the first ones of each file; -1: every one.",
       positive_or_minus_one("every item")},
      {"eval", "batch_size", &c.eval.batch_size,
       "Choices per forward on each data-parallel rank, longest first, each batch padded on the "
       "right to its longest; the data-parallel ranks take turns at the batches.",
       positive<int64_t>("e.g. 8")},
      {"eval", "num_fewshot", &c.eval.num_fewshot,
       "Solved examples before each item, drawn from the other items of its file.",
       zero_or_positive<int64_t>("zero-shot")},
      {"eval", "fewshot_seed", &c.eval.fewshot_seed,
       "Seed of the few-shot examples' draw (with each item's index)."},
      {"eval", "bos", &c.eval.bos,
       "BOS before every context, as titan_train's documents begin with one (false: the "
       "harness's default for Llama)."},
      {"eval", "task_scores", &c.eval.task_scores,
       "Also write each item's per-choice log-likelihoods (rank 0) to this JSON lines file, one "
       "line per item and evaluation, with its step; empty: off."},

      {"metrics", "log_freq", &c.metrics.log_freq,
       "Log a metrics line every this many steps (and the first and last step).",
       positive<int64_t>("log every N steps, e.g. 10")},
      {"metrics", "jsonl", &c.metrics.jsonl,
       "Also write each metrics line as a JSON object to this file; empty: off."},
      {"metrics", "enable_tensorboard", &c.metrics.enable_tensorboard,
       "Also write each metrics line as TensorBoard scalars (event files), and the config as "
       "text."},
      {"metrics", "save_tb_folder", &c.metrics.save_tb_folder,
       "TensorBoard folder, under job.dump_folder. Every start of the job writes its event file "
       "into this same folder (no subfolder per start), so a resumed run's curves continue the "
       "ones before it."},
      {"metrics", "save_for_all_ranks", &c.metrics.save_for_all_ranks,
       "TensorBoard event files from every rank (rank_N subfolders), not only rank 0."},

      {"profiling", "enable_profiling", &c.profiling.enable_profiling,
       "Write a Chrome trace (Perfetto, chrome://tracing) of chosen steps, one file per rank."},
      {"profiling", "save_traces_folder", &c.profiling.save_traces_folder,
       "Trace folder, under job.dump_folder: iteration_N/rankR_trace.json."},
      {"profiling", "profile_freq", &c.profiling.profile_freq,
       "Trace the last profiler_active steps of every profile_freq steps.",
       positive<int64_t>("trace every N steps, e.g. 10")},
      {"profiling", "profiler_warmup", &c.profiling.profiler_warmup,
       "Steps before each traced window that are profiled and their events discarded, so the "
       "traced steps start with the profiler warm (torchtitan's schedule; warmup + active must "
       "fit in profile_freq).",
       zero_or_positive<int64_t>()},
      {"profiling", "profiler_active", &c.profiling.profiler_active,
       "Steps traced in each profile_freq window.",
       positive<int64_t>("trace 1 step per window, e.g. 1")},
      {"profiling", "enable_memory_snapshot", &c.profiling.enable_memory_snapshot,
       "Write each rank's memory by category (parameters, gradients, activations per block, ...) "
       "at its peak step, and on running out of memory."},
      {"profiling", "save_memory_snapshot_folder", &c.profiling.save_memory_snapshot_folder,
       "Memory snapshot folder, under job.dump_folder: iteration_N/rankR_memory_snapshot.json."},

      {"experimental", "unverified_gpu_paths", &c.experimental.unverified_gpu_paths,
       "CUDA paths compiled but not yet run on a GPU, taken only when named here (a "
       "comma-separated list on the command line, or all): cudnn_under_auto (auto takes cuDNN's "
       "attention where it loads), fused_residual_norm (the residual add inside RMSNorm's "
       "kernels), fp8_producer_quantize (FP8 codes written by the kernel producing a linear's "
       "input), device_init (initial values drawn on the GPU). Each has a twin a GPU has run, "
       "taken otherwise, with the same results up to rounding (docs/status.md).",
       [](const std::string& key, const std::vector<std::string>& names) {
         parse_unverified_gpu_paths(names, key);
       }},
  };
}

const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> sections = [] {
    JobConfig config;
    std::vector<std::string> names;
    for (const ConfigKey& key : config_keys(config)) {
      if (names.empty() || names.back() != key.section) names.push_back(key.section);
    }
    return names;
  }();
  return sections;
}

std::string ConfigKey::type_name() const {
  struct Visitor {
    std::string operator()(int64_t*) const { return "int"; }
    std::string operator()(double*) const { return "float"; }
    std::string operator()(bool*) const { return "bool"; }
    std::string operator()(std::string*) const { return "string"; }
    std::string operator()(std::vector<std::string>*) const { return "list of strings"; }
    std::string operator()(std::optional<double>*) const { return "float or null"; }
    std::string operator()(const ChoiceRef& choice) const {
      return list_alternatives(choice.names);
    }
    std::string operator()(const SourceListRef& ref) const {
      return ref.weighted ? "list of {name, path, weight}" : "list of {name, path}";
    }
    std::string operator()(std::vector<model::ParamGroupRule>*) const {
      return "list of {match, lr_scale, weight_decay}";
    }
  };
  return std::visit(Visitor{}, value);
}

std::string ConfigKey::value_text() const {
  struct Visitor {
    std::string operator()(int64_t* v) const { return std::to_string(*v); }
    std::string operator()(double* v) const { return yaml_number(*v); }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(std::string* v) const { return yaml_scalar(*v); }
    std::string operator()(std::vector<std::string>* v) const {
      std::string text = "[";
      for (size_t i = 0; i < v->size(); ++i) text += (i ? ", " : "") + yaml_scalar((*v)[i]);
      return text + "]";
    }
    std::string operator()(std::optional<double>* v) const {
      return v->has_value() ? yaml_number(**v) : "null";
    }
    std::string operator()(const ChoiceRef& choice) const { return choice.text(); }
    std::string operator()(const SourceListRef& ref) const {
      // null, not []: an empty list is refused when read (a list given must name a source).
      if (ref.list->empty()) return "null";
      std::string text = "[";
      for (size_t i = 0; i < ref.list->size(); ++i) {
        const SourceEntry& e = (*ref.list)[i];
        text += (i ? ", " : "") + std::string("{name: ") + yaml_scalar(e.name) +
                ", path: " + yaml_scalar(e.path);
        if (ref.weighted) text += ", weight: " + yaml_number(e.weight);
        text += "}";
      }
      return text + "]";
    }
    std::string operator()(std::vector<model::ParamGroupRule>* groups) const {
      if (groups->empty()) return "null";
      std::string text = "[";
      for (size_t g = 0; g < groups->size(); ++g) {
        const model::ParamGroupRule& rule = (*groups)[g];
        text += (g ? ", " : "") + std::string("{match: ") + yaml_scalar(rule.match) +
                ", lr_scale: " + yaml_number(rule.lr_scale);
        if (rule.weight_decay) text += ", weight_decay: " + yaml_number(*rule.weight_decay);
        text += "}";
      }
      return text + "]";
    }
  };
  return std::visit(Visitor{}, value);
}

namespace {

[[noreturn]] void type_error(const ConfigKey& key, const std::string& text,
                             const std::string& source, const char* expected) {
  input_error(key.path(), ": expected ", expected, ", got '", text, "' (", source, ")");
}

bool parse_int(const std::string& text, int64_t* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(*out);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

}  // namespace

void set_from_text(const ConfigKey& key, const std::string& text, const std::string& source) {
  struct Visitor {
    const ConfigKey& key;
    const std::string& text;
    const std::string& source;
    void operator()(int64_t* v) const {
      if (!parse_int(text, v)) type_error(key, text, source, "an integer");
    }
    void operator()(double* v) const {
      if (!parse_double(text, v)) type_error(key, text, source, "a number");
    }
    void operator()(bool* v) const {
      if (text == "true" || text == "True" || text == "yes" || text == "on" || text == "1") {
        *v = true;
      } else if (text == "false" || text == "False" || text == "no" || text == "off" ||
                 text == "0") {
        *v = false;
      } else {
        type_error(key, text, source, "true or false");
      }
    }
    void operator()(std::string* v) const { *v = text; }
    void operator()(std::vector<std::string>* v) const {
      std::string inner = text;
      if (inner.size() >= 2 && inner.front() == '[' && inner.back() == ']') {
        inner = inner.substr(1, inner.size() - 2);
      }
      *v = split_list(inner);
    }
    void operator()(std::optional<double>* v) const {
      if (text == "null" || text == "none" || text == "None" || text == "~" || text.empty()) {
        v->reset();
        return;
      }
      double d = 0;
      if (!parse_double(text, &d)) type_error(key, text, source, "a number or null");
      *v = d;
    }
    // The one parse of an enum-like key: InputError naming it and listing its allowed values.
    void operator()(const ChoiceRef& choice) const { choice.set(text, key.path()); }
    // A list of maps on the command line is flow YAML: "[{name: a, path: x, weight: 1}]".
    YamlDocument flow_yaml(const char* example) const {
      try {
        return read_yaml_document(text);
      } catch (const YAML::Exception& e) {
        input_error(key.path(), ": cannot parse '", text, "' (", source, "): ", e.msg,
                    "; write it as ", example);
      }
    }
    void operator()(const SourceListRef&) const {
      set_source_list(key, flow_yaml("[{name: a, path: data/a, weight: 1}, …]").root, source);
    }
    void operator()(std::vector<model::ParamGroupRule>*) const {
      set_param_group_list(key, flow_yaml("[{match: norm, weight_decay: 0}, …]").root, source);
    }
  };
  std::visit(Visitor{key, text, source}, key.value);
}

namespace {

// A number as YAML writes it, nan and inf included, so that the checks can name them.
bool parse_yaml_number(const std::string& text, double* out) {
  std::string lower;
  for (char ch : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == ".nan") lower = "nan";
  if (lower == ".inf" || lower == "+.inf") lower = "inf";
  if (lower == "-.inf") lower = "-inf";
  if (lower.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(lower.c_str(), &end);
  return end == lower.c_str() + lower.size();
}

}  // namespace

void set_source_list(const ConfigKey& key, const YAML::Node& node, const std::string& source) {
  const auto* ref = std::get_if<SourceListRef>(&key.value);
  TT_CHECK(ref != nullptr, key.path(), " is not a list of sources");
  const std::string example =
      ref->weighted ? "{name: web, path: data/web, weight: 3}" : "{name: web, path: data/web_val}";
  std::vector<SourceEntry> list;
  if (!node.IsNull()) {
    if (!node.IsSequence()) {
      input_error(key.path(), ": expected a ", key.type_name(), " (", source,
                  "); write it as a list of maps such as ", example);
    }
    if (node.size() == 0) {
      input_error(key.path(), ": the list is empty (", source, "); name at least one source ",
                  example, ", or remove the key");
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      const std::string at = key.path() + "[" + std::to_string(i) + "]";
      if (!item.IsMap()) {
        input_error(at, ": expected a map such as ", example, " (", source, ")");
      }
      SourceEntry entry;
      bool has_name = false, has_path = false, has_weight = false;
      for (const auto& field : item) {
        const std::string name = field.first.IsScalar() ? field.first.Scalar() : "";
        if (!field.second.IsScalar()) {
          input_error(at, ".", name, ": expected a single value, got a list or a map (", source,
                      ")");
        }
        const std::string value = field.second.Scalar();
        if (name == "name") {
          entry.name = value;
          has_name = true;
        } else if (name == "path") {
          entry.path = value;
          has_path = true;
        } else if (name == "weight" && ref->weighted) {
          if (!parse_yaml_number(value, &entry.weight)) {
            input_error(at, ".weight: expected a number, got '", value, "' (", source, ")");
          }
          has_weight = true;
        } else {
          input_error(at, ": unknown field '", name, "' (", source, "); an entry has ",
                      ref->weighted ? "name, path and weight" : "name and path");
        }
      }
      if (!has_name || !has_path || (ref->weighted && !has_weight)) {
        input_error(at, ": missing its ",
                    !has_name   ? "name"
                    : !has_path ? "path"
                                : "weight",
                    " (", source, "); write each entry as ", example);
      }
      list.push_back(std::move(entry));
    }
  }
  *ref->list = std::move(list);
}

void set_param_group_list(const ConfigKey& key, const YAML::Node& node,
                          const std::string& source) {
  auto* const* groups = std::get_if<std::vector<model::ParamGroupRule>*>(&key.value);
  TT_CHECK(groups != nullptr, key.path(), " is not a list of parameter groups");
  const std::string example = "{match: norm, weight_decay: 0}";
  std::vector<model::ParamGroupRule> list;
  if (!node.IsNull()) {
    if (!node.IsSequence()) {
      input_error(key.path(), ": expected a ", key.type_name(), " (", source,
                  "); write it as a list of maps such as ", example);
    }
    for (size_t g = 0; g < node.size(); ++g) {
      const YAML::Node& item = node[g];
      const std::string at = key.path() + "[" + std::to_string(g) + "]";
      if (!item.IsMap()) input_error(at, ": expected a map such as ", example, " (", source, ")");
      model::ParamGroupRule rule;
      bool has_match = false;
      for (const auto& field : item) {
        const std::string name = field.first.IsScalar() ? field.first.Scalar() : "";
        if (!field.second.IsScalar()) {
          input_error(at, ".", name, ": expected a single value, got a list or a map (", source,
                      ")");
        }
        const std::string value = field.second.Scalar();
        double number = 0;
        const bool numeric = parse_yaml_number(value, &number);
        if (name == "match") {
          rule.match = value;
          has_match = true;
        } else if (name == "lr_scale" || name == "weight_decay") {
          if (!numeric) {
            input_error(at, ".", name, ": expected a number, got '", value, "' (", source, ")");
          }
          if (name == "lr_scale") {
            rule.lr_scale = number;
          } else {
            rule.weight_decay = number;
          }
        } else {
          input_error(at, ": unknown field '", name, "' (", source,
                      "); a group has match, lr_scale and weight_decay");
        }
      }
      if (!has_match) {
        input_error(at, ": missing its match (", source, "); write each group as ", example);
      }
      list.push_back(std::move(rule));
    }
  }
  **groups = std::move(list);
}

}  // namespace titan::app
