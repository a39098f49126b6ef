#include "app/plan/plan_report.h"

#include <fmt/format.h>

#include <cmath>

#include "core/byte_units.h"

namespace titan::app::plan {

namespace {

// The categories in the order a reader looks for them.
constexpr MemoryCategory kOrder[] = {
    MemoryCategory::Parameters,         MemoryCategory::Gradients,
    MemoryCategory::OptimizerState,     MemoryCategory::Fp8Cache,
    MemoryCategory::GatheredParameters, MemoryCategory::Activations,
    MemoryCategory::CommBuffers,        MemoryCategory::Other,
};

std::string flops_text(double flops) {
  if (flops >= 1e15) return fmt::format("{:.2f} PFLOP", flops / 1e15);
  if (flops >= 1e12) return fmt::format("{:.2f} TFLOP", flops / 1e12);
  return fmt::format("{:.2f} GFLOP", flops / 1e9);
}

std::string ms(double seconds) { return fmt::format("{:.1f} ms", seconds * 1e3); }

std::string job_line(const PlanJob& job, const DeviceSpec& device) {
  const JobConfig& c = job.config;
  const JobConfig::Parallelism& p = c.parallelism;
  const std::string micro =
      job.mesh.pp > 1
          ? fmt::format(
                "{} step{} of {} sequences per rank, each in micro-batches of {} through "
                "{} stages ({})",
                job.accumulation, job.accumulation == 1 ? "" : "s", c.training.local_batch_size,
                p.pipeline_parallel_microbatch_size, job.mesh.pp,
                parallel::pipeline::kScheduleKindNames.name(p.pipeline_parallel_schedule))
          : fmt::format("{} micro-batch{} of {} per rank", job.accumulation,
                        job.accumulation == 1 ? "" : "es", c.training.local_batch_size);
  return fmt::format(
      "model {} ({} layers, dim {}); {} sequence{} × {} tokens a step: {}; activation "
      "checkpointing {}; {} compute; float8 {}{}",
      job.args.flavor, job.args.n_layers, job.args.dim, job.global_batch,
      job.global_batch == 1 ? "" : "s", c.training.seq_len, micro, job.ac.describe(),
      device.cuda ? "bf16" : "f32",
      c.float8.enabled ? std::string(fp8::recipe_name(c.float8.recipe)) : std::string("off"),
      c.float8.enabled && c.float8.enable_fsdp_float8_all_gather ? " (float8 all-gather)" : "");
}

}  // namespace

std::string format_bytes(double bytes) {
  if (bytes >= kGiB) return fmt::format("{:.2f} GiB", bytes / kGiB);
  if (bytes >= kMiB) return fmt::format("{:.1f} MiB", bytes / kMiB);
  if (bytes >= kKiB) return fmt::format("{:.1f} KiB", bytes / kKiB);
  return fmt::format("{:.0f} B", bytes);
}

std::string format_plan(const PlanJob& job, const DeviceSpec& device, const MemoryPlan& memory,
                        const StepTime& time) {
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  line(fmt::format("plan: {} on {} × {} ({}), mesh {}", job.args.flavor, job.mesh.world(),
                   device.name, device.description, job.mesh.describe()));
  line("  " + job_line(job, device));
  if (job.args.lora.enabled()) {
    line("  " + model::describe_lora(job.args) + " (no gradient or optimizer state)");
  }
  for (const std::string& note : memory.float8_notes) line("  " + note);

  line("");
  line(memory.pipeline_rank >= 0
           ? fmt::format("memory of pp rank {}, the one that holds the most, at the step's peak "
                         "(the categories of a memory snapshot):",
                         memory.pipeline_rank)
           : std::string("memory of each rank at the step's peak (the categories of a memory "
                         "snapshot):"));
  for (MemoryCategory c : kOrder) {
    std::string extra;
    if (c == MemoryCategory::Activations) {
      extra = fmt::format(
          "  {} kept from forward to backward per micro-batch, {} micro-batch{} "
          "in flight",
          format_bytes(memory.kept_activations), memory.microbatches_in_flight,
          memory.microbatches_in_flight == 1 ? "" : "es");
    }
    line(fmt::format("  {:<22}{:>12}{}", category_name(c), format_bytes(memory.at_peak[c]), extra));
  }
  line(fmt::format("  {:<22}{:>12}  what a memory snapshot measures", "tensors",
                   format_bytes(memory.peak)));
  if (device.cuda) {
    line(fmt::format("  {:<22}{:>12}  {}", "runtime reserve", format_bytes(memory.runtime_reserve),
                     kCudaReserveSource));
    line(fmt::format("  {:<22}{:>12}  {}", "allocator slack", format_bytes(memory.allocator_slack),
                     kCudaSlackSource));
  }
  const double capacity = device.memory_bytes;
  line(fmt::format("  {:<22}{:>12}  of {} ({:.1f}%)", "total", format_bytes(memory.total()),
                   format_bytes(capacity), 100 * memory.total() / capacity));
  const MemoryCategory largest = largest_category(memory);
  if (memory.total() <= capacity) {
    line(fmt::format("verdict: fits, {} to spare; the largest part is {} ({})",
                     format_bytes(capacity - memory.total()), category_name(largest),
                     format_bytes(memory.at_peak[largest])));
  } else {
    line(fmt::format("verdict: does not fit, {} over; the largest part is {} ({}): {}",
                     format_bytes(memory.total() - capacity), category_name(largest),
                     format_bytes(memory.at_peak[largest]), how_to_shrink(largest, job)));
  }

  line("");
  line("time of a step (estimated):");
  auto row = [&line](const std::string& label, const std::string& text) {
    line(fmt::format("  {:<28}{}", label, text));
  };
  row("FLOPs per rank", fmt::format("{} model (torchtitan's count, MFU's), {} as run "
                                    "(recomputation, causal attention)",
                                    flops_text(time.model_flops), flops_text(time.hardware_flops)));
  if (time.comm.empty()) row("bytes sent per rank", "none (one rank per replica, no tp)");
  for (const MeshDimBytes& dim : time.comm) {
    row("bytes sent on " + parallel::mesh_dims_text(dim.dims, " × "),
        fmt::format("{} per rank per step, {} over {}", format_bytes(dim.bytes), ms(dim.seconds),
                    dim.intra_node ? "NVLink (inside a node)" : "the network"));
  }
  row("compute",
      fmt::format("linears {}, attention {}, element-wise {}, optimizer {}", ms(time.linear_s),
                  ms(time.attention_s), ms(time.elementwise_s), ms(time.optimizer_s)));
  row("communication exposed", ms(time.comm_exposed_s));
  if (time.pipeline_bubble > 0) {
    row("pipeline bubble", fmt::format("{:.1f}% of the step", 100 * time.pipeline_bubble));
  }
  row("step", fmt::format("{}: {:.0f} tokens/s ({:.0f} per device){}", ms(time.step_s),
                          time.tokens_per_s, time.tokens_per_s_per_device,
                          time.mfu > 0 ? fmt::format(", MFU {:.1f}%", 100 * time.mfu) : ""));
  line("assumptions:");
  for (const Assumption& a : time.assumptions) line(fmt::format("  {} [{}]", a.what, a.source));
  line(fmt::format("  {}: {}", device.name, device.source));
  return out;
}

std::string format_search(const JobConfig& config, int64_t world, const DeviceSpec& device,
                          const std::vector<MeshCandidate>& candidates) {
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  int fitting = 0;
  for (const MeshCandidate& c : candidates) fitting += c.fits ? 1 : 0;
  line(fmt::format("plan search: {} on {} × {} ({}): {} of {} meshes fit, fastest first",
                   config.model.flavor, world, device.name, device.description, fitting,
                   candidates.size()));
  line(fmt::format("  {:<50}{:>12}{:>12}{:>14}{:>8}  {}", "mesh", "memory", "step", "tokens/s",
                   "MFU", "largest part"));
  for (const MeshCandidate& c : candidates) {
    if (!c.plannable) continue;
    const MemoryCategory largest = largest_category(c.memory);
    line(fmt::format("  {:<50}{:>12}{:>12}{:>14.0f}{:>7.1f}%  {}{}", c.mesh.describe(),
                     format_bytes(c.memory.total()), ms(c.time.step_s), c.time.tokens_per_s,
                     100 * c.time.mfu, category_name(largest), c.fits ? "" : "  (does not fit)"));
  }
  for (const MeshCandidate& c : candidates) {
    if (!c.plannable) line(fmt::format("  {:<50}not plannable: {}", c.mesh.describe(), c.why_not));
  }
  line(
      fmt::format("memory against {} per device; titan_train --plan --parallelism.dp_replicate R "
                  "--parallelism.dp_shard S --parallelism.context_parallel_degree C "
                  "--parallelism.tp T prints one mesh in full",
                  format_bytes(device.memory_bytes)));
  return out;
}

}  // namespace titan::app::plan
