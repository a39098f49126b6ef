#include "app/trainer_checks.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>

#include "app/plan/memory_plan.h"
#include "core/byte_units.h"
#include "core/check.h"
#include "parallel/parallelize.h"

namespace titan::app {

std::optional<PipelinePlan> check_pipeline(const JobConfig& config, const model::ModelArgs& args) {
  const JobConfig& c = config;
  if (c.parallelism.pipeline_parallel_degree == 1) return std::nullopt;
  PipelinePlan plan = plan_pipeline(c, args);
  const int64_t micro = plan.microbatch_size, tp = c.parallelism.tp;
  const int64_t cp = c.parallelism.context_parallel_degree;
  if (tp < 1 || cp < 1) return plan;  // the mesh's refusal names the degree
  // Each microbatch crosses the stages as tp sequence shards of a cp rank's S/cp tokens.
  const int64_t local_seq = c.training.seq_len / cp;
  if ((micro * local_seq) % tp != 0) {
    input_error("parallelism.pipeline_parallel_microbatch_size: ", micro, " × training.seq_len ",
                c.training.seq_len,
                cp > 1 ? detail::concat(" / context_parallel_degree ", cp) : std::string(), " = ",
                micro * local_seq, " tokens per microbatch do not split into tp ", tp,
                " sequence shards; make microbatch_size × seq_len a multiple of ", tp * cp);
  }
  // Validation runs the training microbatch when it divides the validation batch, else the
  // whole validation batch as one microbatch (TrainStep::validation_loss).
  if (c.validation.enable) {
    const int64_t batch = c.validation.resolved_local_batch_size(c.training);
    const int64_t seq = c.validation.resolved_seq_len(c.training) / cp;
    const int64_t rows = batch % micro == 0 ? micro : batch;
    if ((rows * seq) % tp != 0) {
      input_error("validation.seq_len: a validation microbatch of ", rows, " × ", seq,
                  " tokens per cp rank does not split into tp ", tp,
                  " sequence shards; make validation.seq_len a multiple of ", tp * cp);
    }
  }
  return plan;
}

std::optional<int32_t> check_document_eos(const JobConfig& config, const data::Tokenizer& tokenizer,
                                          std::string_view tokenizer_key) {
  if (config.model.attention_mask != model::AttentionMaskKind::BlockCausal) return std::nullopt;
  std::optional<int32_t> eos = tokenizer.eos_id();
  if (!eos) {
    input_error(
        "model.attention_mask: block_causal ends each document at the tokenizer's EOS, "
        "but ",
        tokenizer.describe(), " has none (", tokenizer_key,
        "); use causal, or a tokenizer with an end-of-text token");
  }
  return eos;
}

void check_model_fits_mesh(const JobConfig& config, const model::ModelArgs& args,
                           const parallel::ParallelDims& dims) {
  parallel::check_tensor_parallel_fit(args, dims.tp, "parallelism.tp");
  const JobConfig::Training& t = config.training;
  int64_t tokens = 0;
  if (__builtin_mul_overflow(t.local_batch_size, t.seq_len, &tokens) ||
      __builtin_mul_overflow(t.local_batch_size, dims.dp(), &tokens)) {
    input_error("training.local_batch_size: ", t.local_batch_size, " sequences × seq_len ",
                t.seq_len, " × dp ", dims.dp(),
                " overflow 64 bits; use a micro-batch that "
                "fits the device (e.g. local_batch_size 8, seq_len 8192)");
  }
}

BatchPlan resolve_batch(const JobConfig& config, const parallel::ParallelDims& dims) {
  const JobConfig::Training& t = config.training;
  const int64_t dp = dims.dp();
  const int64_t micro_batch = t.local_batch_size * dp;  // sequences per micro-step, all dp ranks
  BatchPlan batch;
  batch.global_batch = t.global_batch_size == -1 ? micro_batch : t.global_batch_size;
  if (batch.global_batch % micro_batch != 0) {
    input_error("training.global_batch_size: ", batch.global_batch,
                " is not a multiple of local_batch_size ", t.local_batch_size, " × dp ", dp, " = ",
                micro_batch, "; use a multiple of ", micro_batch,
                " (or -1 for no gradient accumulation)");
  }
  batch.accumulation = batch.global_batch / micro_batch;
  batch.validation_local_batch = config.validation.resolved_local_batch_size(t);
  batch.validation_seq_len = config.validation.resolved_seq_len(t);
  return batch;
}

DeviceCapacity capacity_of(const RankDevice& rank, int local_size) {
  DeviceCapacity capacity;
  capacity.cuda = rank.device.is_cuda();
  if (capacity.cuda) {
    capacity.bytes = static_cast<double>(rank.gpu.info.total_bytes);
    capacity.sharers = rank.gpu.sharers;
    capacity.where =
        detail::concat(rank.device, " (", capacity.sharers, " rank(s)), whose ", rank.gpu.info.name,
                       " has ", std::llround(capacity.bytes / kGiB), " GiB");
  } else {
    capacity.bytes =
        static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    capacity.sharers = local_size;
    capacity.where = detail::concat("this node's ", capacity.sharers, " rank(s), which has ",
                                    std::llround(capacity.bytes / kGiB), " GiB");
  }
  return capacity;
}

namespace {

// Layers the plan describes one by one without a thought for its own memory: eight times the
// deepest Llama published (405B's 126).
constexpr std::int64_t kLayersThePlanDescribesFreely = 1024;

// Before the plan of a deeper model, which describes every layer: the parameters alone, with
// their gradients and the optimizer's state (AdamW's two moments: 16 bytes each in f32, 12 with
// bf16 moments; Muon's one momentum: 12 or 10), spread over every dim that shards them, must fit. Arithmetic in double, on the dims only, so that a model of 10⁸ layers
// is refused here in one line and not by the allocator. A shallower model is left to the plan,
// whose refusal names the largest part of the step.
void check_parameters_fit(const JobConfig& config, const model::ModelArgs& args,
                          const parallel::ParallelDims& dims, const DeviceCapacity& capacity) {
  if (args.n_layers <= kLayersThePlanDescribesFreely) return;
  model::ModelArgs one = args, none = args;
  one.n_layers = 1;
  none.n_layers = 0;
  const double base = static_cast<double>(model::count_parameters(none));
  const double per_layer = static_cast<double>(model::count_parameters(one)) - base;
  const double parameters = base + per_layer * static_cast<double>(args.n_layers);
  const double shards = static_cast<double>(dims.pp * dims.dp_shard * dims.cp * dims.tp);
  // Muon keeps one momentum of most weights (AdamW's two of the few others): at least one.
  const double states = config.optimizer.name == "Muon" ? 1.0 : 2.0;
  const double bytes_each =
      8.0 + states * static_cast<double>(model::moment_bytes(config.optimizer.state_dtype));
  const double need = parameters * bytes_each / shards * capacity.sharers;
  if (need <= capacity.bytes) return;
  input_error("model.n_layers: ", args.n_layers, " layers of ", fmt::format("{:.3g}", per_layer),
              " parameters each hold ", fmt::format("{:.3g}", parameters),
              " parameters, whose weights, gradients and optimizer state need at least ",
              fmt::format("{:.1f}", need / kGiB), " GiB a rank on ", capacity.where,
              "; use fewer layers, or shard them over more ranks (",
              config.model.flavor.empty() ? "" : "model.flavor " + config.model.flavor + ", ",
              "titan_train --plan says what fits)");
}

}  // namespace

void check_memory(const JobConfig& config, const model::ModelArgs& args,
                  const parallel::ParallelDims& dims, const DeviceCapacity& capacity) {
  check_parameters_fit(config, args, dims, capacity);
  const plan::PlanJob job = plan::plan_job(config, plan::PlanMesh::of(dims));
  const plan::MemoryPlan memory = plan::plan_memory(job, capacity.cuda);
  const double need = memory.total() * capacity.sharers;
  if (need <= capacity.bytes) return;
  auto gib = [](double bytes) { return fmt::format("{:.1f}", bytes / kGiB); };
  const MemoryCategory largest = plan::largest_category(memory);
  const double part = memory.at_peak[largest] * capacity.sharers;
  const std::string over = detail::concat(
      gib(need - capacity.bytes), " GiB more than it has; the largest part is ",
      plan::category_name(largest), " (", gib(part), " GiB): ", plan::how_to_shrink(largest, job),
      " (titan_train --plan prints every part)");
  const JobConfig::Training& t = config.training;
  if (largest == MemoryCategory::Activations) {
    input_error("training.local_batch_size: ", t.local_batch_size, " sequences × seq_len ",
                t.seq_len, " need about ", gib(part),
                " GiB of activations (activation_checkpoint.mode ",
                config.activation_checkpoint.mode, ") besides ", gib(need - part),
                " GiB of the rest on ", capacity.where, ", ", over);
  }
  input_error("model.flavor: ", args.flavor, " needs ", gib(need),
              " GiB by the plan of its step on ", capacity.where, ", ", over);
}

}  // namespace titan::app
