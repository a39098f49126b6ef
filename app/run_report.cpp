#include "app/run_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/byte_units.h"
#include "data/documents.h"
#include "model/optim/lr_scheduler.h"
#include "parallel/context_parallel.h"
#include "parallel/pipeline/schedule.h"

namespace titan::app {

namespace {

class Lines {
 public:
  template <typename... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) {
    lines_.push_back({false, fmt::format(format, std::forward<Args>(args)...)});
  }
  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) {
    lines_.push_back({true, fmt::format(format, std::forward<Args>(args)...)});
  }
  std::vector<ReportLine> take() { return std::move(lines_); }

 private:
  std::vector<ReportLine> lines_;
};

void add_pipeline(Lines& out, const PipelinePlan& p, int64_t pp) {
  out.info(
      "pipeline {}: {} stages over pp {}, {} microbatches of {} sequence{} per local batch; "
      "simulated bubble {:.3f}, at most {} microbatch activations held per rank",
      parallel::pipeline::kScheduleKindNames.name(p.schedule.kind), p.stages.size(), pp,
      p.microbatches(), p.microbatch_size, p.microbatch_size == 1 ? "" : "s", p.simulation.bubble,
      std::max_element(p.simulation.ranks.begin(), p.simulation.ranks.end(),
                       [](const auto& a, const auto& b) { return a.peak_held < b.peak_held; })
          ->peak_held);
  for (int64_t r = 0; r < pp; ++r) {
    std::string held;
    for (int64_t s : p.stages_of(r)) {
      held += fmt::format("{}stage {} ({})", held.empty() ? "" : ", ", s,
                          parallel::pipeline::describe(p.stages[static_cast<size_t>(s)]));
    }
    out.info("  pp rank {}: {}", r, held);
  }
}

}  // namespace

std::vector<ReportLine> run_start_report(const JobConfig& c, const RunStartFacts& f) {
  Lines out;
  const model::ModelArgs& a = f.args;
  const parallel::ParallelDims& dims = f.dims;
  out.info("titan_train: {}", c.job.description);
  out.info(
      "model {} ({}): dim {}, {} layers, {} heads, {} kv heads, ffn {}, vocab {}; "
      "{:.2f}M parameters",
      a.flavor, c.model.name, a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.ffn_dim, a.vocab_size,
      static_cast<double>(model::count_parameters(a)) / 1e6);
  if (a.lora.enabled()) out.info("{}", model::describe_lora(a));
  out.info("mesh {} on {}; {}; activation checkpointing {}", dims.describe(),
           c.training.device.str(), f.data_parallel, f.activation_checkpoint);
  if (f.pipeline) add_pipeline(out, *f.pipeline, dims.pp);
  if (c.float8.enabled) {
    for (const std::string& line : f.float8.auto_filtered) out.warn("{}", line);
    if (c.float8.enable_fsdp_float8_all_gather && dims.dp_shard == 1) {
      out.warn("float8.enable_fsdp_float8_all_gather: no effect without FSDP (dp_shard 1)");
    }
    out.info("float8 {}: {} of {} linears converted (filter_fqns: {})",
             fp8::recipe_name(c.float8.recipe), f.float8.converted.size(), f.linear_count,
             fmt::join(c.float8.filter_fqns, ", "));
  }
  if (dims.cp > 1) {
    const int64_t S = c.training.seq_len;
    out.info(
        "context parallel cp {} ({}): each rank holds chunks r and {} − r of {} tokens of every "
        "sequence of {} ({} tokens), their attention over the whole sequence",
        dims.cp, parallel::kCpRotateMethods.name(c.parallelism.context_parallel_comm),
        2 * dims.cp - 1, S / (2 * dims.cp), S, S / dims.cp);
  }
  if (!f.tp_table.empty()) {
    out.info("tensor parallel {} (tp {}):",
             c.parallelism.enable_async_tensor_parallel ? "async" : "synchronous", dims.tp);
    for (const std::string& line : f.tp_table) out.info("  {}", line);
  }
  out.info("per rank: parameters {:.2f} MiB, gradients {:.2f} MiB, {} state {:.2f} MiB",
           static_cast<double>(f.memory.param_bytes) / kMiB,
           static_cast<double>(f.memory.grad_bytes) / kMiB, c.optimizer.name,
           static_cast<double>(f.optimizer_state_bytes) / kMiB);
  out.info("data {}: {} windows of {} tokens per epoch", f.data, f.windows_per_epoch,
           c.training.seq_len);
  if (!f.validation_data.empty()) {
    const int64_t global = f.batch.validation_local_batch * dims.dp();
    const int64_t batches = f.validation_batches;
    out.info(
        "validation {}: {} batch{} of {} sequences × {} tokens, in order from its start, after "
        "step 1 and every {} steps",
        f.validation_data, batches, batches == 1 ? "" : "es", global, f.batch.validation_seq_len,
        c.validation.freq);
    if (batches * global > f.validation_windows) {
      out.warn(
          "validation.steps: {} batches of {} sequences need {} windows but the held-out data "
          "holds {}; the batches past its end start again from its first window",
          batches, global, batches * global, f.validation_windows);
    }
  }
  const int64_t accumulation = f.batch.accumulation;
  out.info(
      "batch: {} sequences × {} tokens per step ({} micro-step{} of {} per rank), "
      "{} steps, lr {:g} (warmup {}, decay {} {}), seed {}",
      f.batch.global_batch, c.training.seq_len, accumulation, accumulation == 1 ? "" : "s",
      c.training.local_batch_size, c.training.steps, c.optimizer.lr, f.warmup_steps, f.decay_steps,
      model::kDecayTypes.name(c.lr_scheduler.decay_type), c.training.seed);
  return out.take();
}

std::vector<ReportLine> run_end_report(const RunEndFacts& f) {
  Lines out;
  if (f.cuda) {
    out.info("trained {} steps in {:.1f} s", f.trained_steps, f.seconds);
  } else {
    out.info(
        "trained {} steps in {:.1f} s; GEMMs took {:.1f} s ({:.0f}% of the time, "
        "{:.1f} GFLOP/s over {} calls)",
        f.trained_steps, f.seconds, f.gemm.seconds, 100.0 * f.gemm.seconds / f.seconds,
        f.gemm.flops / f.gemm.seconds / 1e9, f.gemm.calls);
  }
  const parallel::ParamMemory& p = f.params;
  if (p.peak_unsharded_bytes > 0) {
    const double persistent =
        static_cast<double>(p.param_bytes + p.grad_bytes + f.optimizer_state_bytes);
    out.info(
        "FSDP: at most {:.2f} MiB of gathered parameters, their gradients and collective buffers "
        "at once; peak parameter + gradient + optimizer memory {:.2f} MiB per rank",
        static_cast<double>(p.peak_unsharded_bytes) / kMiB,
        (persistent + static_cast<double>(p.peak_unsharded_bytes)) / kMiB);
    out.info("FSDP: all-gathered {:.2f} MiB per step per rank",
             static_cast<double>(p.gathered_bytes) / kMiB /
                 static_cast<double>(std::max<int64_t>(1, f.trained_steps)));
  }
  return out.take();
}

ReportLine count_document_attention(RunFacts& facts, const model::ModelArgs& args,
                                    const data::TokenSource& source, int64_t seq_len,
                                    int32_t eos_id) {
  const data::DocumentContext d = data::sample_document_context(source, seq_len, eos_id);
  if (d.windows > 0) {
    facts.attention_keys = d.keys_per_token;
    facts.flops_per_token = model::training_flops_per_token(args, d.keys_per_token);
  }
  return {false, fmt::format("block_causal: tflops and MFU count attention over {:.1f} keys a "
                             "token (Σ n²/S over the documents of {} windows of data.path, {:.1f} "
                             "documents a window), not {}",
                             d.keys_per_token, d.windows, d.mean_documents, seq_len)};
}

void log_report(const std::vector<ReportLine>& lines) {
  for (const ReportLine& line : lines) {
    if (line.warning) {
      spdlog::warn("{}", line.text);
    } else {
      spdlog::info("{}", line.text);
    }
  }
}

}  // namespace titan::app
