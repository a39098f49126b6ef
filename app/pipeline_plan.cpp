#include "app/pipeline_plan.h"

#include "core/check.h"
#include "parallel/pipeline/schedule_table.h"

namespace titan::app {

namespace pp = parallel::pipeline;

namespace {

constexpr char kDegree[] = "parallelism.pipeline_parallel_degree";
constexpr char kSchedule[] = "parallelism.pipeline_parallel_schedule";
constexpr char kMicrobatch[] = "parallelism.pipeline_parallel_microbatch_size";
constexpr char kLayersPerStage[] = "parallelism.pipeline_parallel_layers_per_stage";

pp::StageSplitKeys split_keys() {
  return {kDegree, kLayersPerStage, "parallelism.pipeline_parallel_first_stage_less_layers",
          "parallelism.pipeline_parallel_last_stage_less_layers"};
}

}  // namespace

PipelinePlan plan_pipeline(const JobConfig& config, const model::ModelArgs& args) {
  const JobConfig::Parallelism& p = config.parallelism;
  const pp::ScheduleKind kind = p.pipeline_parallel_schedule;
  const std::string_view name = pp::kScheduleKindNames.name(kind);
  const int64_t degree = p.pipeline_parallel_degree;
  pp::StageSplitOptions split;
  split.layers_per_stage =
      p.pipeline_parallel_layers_per_stage < 0 ? 0 : p.pipeline_parallel_layers_per_stage;
  split.first_stage_less_layers = p.pipeline_parallel_first_stage_less_layers;
  split.last_stage_less_layers = p.pipeline_parallel_last_stage_less_layers;

  int64_t per_rank = 1;
  if (degree > 1) {
    per_rank = pp::stages_per_rank_for(args.n_layers, degree, pp::is_single_stage(kind), split,
                                       split_keys())
                   .value_or_throw();
    if (kind == pp::ScheduleKind::ZBV_ZERO_BUBBLE && per_rank != 2) {
      input_error(kSchedule, ": ", name, " places exactly 2 stages on each rank (a V), but ",
                  kLayersPerStage, " ", p.pipeline_parallel_layers_per_stage, " gives ", per_rank,
                  "; set ", kLayersPerStage, " to -1, or choose InterleavedZeroBubble");
    }
  }
  pp::ValueOrRefusal<std::vector<pp::StageLayers>> split_outcome =
      pp::split_stages(args.n_layers, degree * per_rank, split, split_keys());
  if (!split_outcome) {
    input_error(kDegree, " ", degree, " × ", per_rank, " stage", per_rank == 1 ? "" : "s",
                " per rank: ", split_outcome.error());
  }
  std::vector<pp::StageLayers> stages = std::move(split_outcome).value_or_throw();

  const int64_t local = config.training.local_batch_size;
  const int64_t micro = p.pipeline_parallel_microbatch_size;
  if (local % micro != 0) {
    input_error(kMicrobatch, ": training.local_batch_size ", local, " does not split into ",
                "microbatches of ", micro, " sequences; choose a microbatch size that divides ",
                local, " (e.g. 1)");
  }
  const int64_t m = local / micro;
  // torchtitan only warns; here a pipeline whose stages cannot all be busy at once is refused:
  // with m < pp the bubble is at least (pp − m)/pp of the step whatever the schedule.
  if (degree > 1 && m < degree) {
    input_error(kMicrobatch, ": training.local_batch_size ", local, " / microbatch size ", micro,
                " = ", m, " microbatch", m == 1 ? "" : "es", ", fewer than the ", degree,
                " pipeline ranks of ", name, " (", kDegree, " ", degree,
                "), which would leave ranks idle most of the step; use at least ", degree,
                " microbatches: training.local_batch_size ", degree * micro,
                " or more, or a smaller microbatch size");
  }
  pp::ValueOrRefusal<pp::PipelineSchedule> schedule =
      pp::generate_schedule(kind, degree, per_rank, m);
  if (!schedule) {
    input_error(kSchedule, ": ", schedule.error(), " (", m, " microbatches = training.",
                "local_batch_size ", local, " / ", kMicrobatch, " ", micro, ")");
  }
  // Proven before it runs: a list the simulator refuses would deadlock or corrupt gradients.
  pp::ValueOrRefusal<pp::Simulation> simulation = pp::simulate(schedule.value());
  TT_CHECK(simulation.ok(), "pipeline: the ", name, " lists for pp ", degree, ", ", per_rank,
           " stages per rank and ", m, " microbatches fail the simulator: ", simulation.error());
  return PipelinePlan{std::move(stages), std::move(schedule).value_or_throw(),
                      std::move(simulation).value_or_throw(), micro};
}

model::ModelPart model_part(const pp::StageLayers& stage) {
  return {stage.first_layer, stage.end_layer, stage.embedding, stage.output};
}

std::string pipeline_report(const JobConfig& config, const model::ModelArgs& args) {
  const PipelinePlan plan = plan_pipeline(config, args);
  std::string text = detail::concat(
      "pipeline: ", config.parallelism.pipeline_parallel_degree, " rank",
      config.parallelism.pipeline_parallel_degree == 1 ? "" : "s", ", ", plan.stages.size(),
      " stage", plan.stages.size() == 1 ? "" : "s", " of model ", args.flavor, " (", args.n_layers,
      " layers), ", plan.microbatches(), " microbatch", plan.microbatches() == 1 ? "" : "es",
      " of ", plan.microbatch_size, " sequence", plan.microbatch_size == 1 ? "" : "s", "\n");
  for (int64_t r = 0; r < plan.schedule.pp(); ++r) {
    text += detail::concat("  rank ", r, ":");
    for (int64_t s : plan.stages_of(r)) {
      text += detail::concat(" stage ", s, " (", pp::describe(plan.stages[static_cast<size_t>(s)]),
                             ")");
    }
    text += "\n";
  }
  text += pp::schedule_table(plan.schedule, plan.simulation);
  return text;
}

}  // namespace titan::app
