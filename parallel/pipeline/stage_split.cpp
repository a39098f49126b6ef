#include "parallel/pipeline/stage_split.h"

#include <utility>

#include "core/check.h"

namespace titan::parallel::pipeline {
ValueOrRefusal<int64_t> stages_per_rank_for(int64_t num_layers, int64_t pp,
                                            bool single_stage_schedule,
                                            const StageSplitOptions& options,
                                            const StageSplitKeys& keys) {
  if (pp < 1) {
    return ValueOrRefusal<int64_t>::refused(detail::concat(
        keys.pp, ": the pipeline degree must be at least 1, got ", pp, "; set it to 1 or more"));
  }
  if (options.layers_per_stage < 0) {
    return ValueOrRefusal<int64_t>::refused(detail::concat(
        keys.layers_per_stage, ": must be 0 (derive) or a positive number of layers, got ",
        options.layers_per_stage, "; set it to 0 or more"));
  }
  if (options.layers_per_stage == 0) return single_stage_schedule ? int64_t{1} : int64_t{2};

  const int64_t effective =
      num_layers + options.first_stage_less_layers + options.last_stage_less_layers;
  const int64_t stages = (effective + options.layers_per_stage - 1) / options.layers_per_stage;
  const std::string seen =
      detail::concat(keys.layers_per_stage, " ", options.layers_per_stage, " gives ", stages,
                     " stages for the ", effective, " effective layers (L ", num_layers, " + ",
                     keys.first_stage_less_layers, " ", options.first_stage_less_layers, " + ",
                     keys.last_stage_less_layers, " ", options.last_stage_less_layers, ")");
  if (stages % pp != 0) {
    return ValueOrRefusal<int64_t>::refused(
        detail::concat(seen, ", which does not divide over ", keys.pp, " ", pp, " ranks; change ",
                       keys.layers_per_stage, " or ", keys.pp,
                       " so that the stage count is a multiple of ", keys.pp));
  }
  const int64_t per_rank = stages / pp;
  if (single_stage_schedule && per_rank != 1) {
    return ValueOrRefusal<int64_t>::refused(detail::concat(
        seen, ", ", per_rank, " per rank, and a single-stage schedule holds exactly 1; raise ",
        keys.layers_per_stage, " to ", (effective + pp - 1) / pp,
        " or more, or choose a multi-stage schedule"));
  }
  if (!single_stage_schedule && per_rank < 2) {
    return ValueOrRefusal<int64_t>::refused(detail::concat(
        seen, ", ", per_rank, " per rank, and a multi-stage schedule needs at least 2; lower ",
        keys.layers_per_stage, " to ", effective / (2 * pp),
        " or less, or choose a single-stage schedule"));
  }
  return per_rank;
}

ValueOrRefusal<std::vector<StageLayers>> split_stages(int64_t num_layers, int64_t num_stages,
                                                      const StageSplitOptions& options,
                                                      const StageSplitKeys& keys) {
  using Result = ValueOrRefusal<std::vector<StageLayers>>;
  const int64_t first = options.first_stage_less_layers;
  const int64_t last = options.last_stage_less_layers;
  if (num_layers < 1) {
    return Result::refused(detail::concat("pipeline split: the model has ", num_layers,
                                          " transformer layers; it needs at least 1"));
  }
  if (first < 0 || last < 0) {
    return Result::refused(detail::concat(
        keys.first_stage_less_layers, " ", first, " and ", keys.last_stage_less_layers, " ", last,
        ": the weights of the embedding and norm+output must be 0 or "
        "more; set them to 0 or more (1 is torchtitan's default)"));
  }
  if (num_stages < 1) {
    return Result::refused(detail::concat("pipeline split: ", num_stages, " stages; ", keys.pp,
                                          " and the stages per rank must give at least 1"));
  }
  if (num_stages == 1) return std::vector<StageLayers>{{0, num_layers, true, true}};

  const int64_t effective = num_layers + first + last;
  const std::string seen = detail::concat(
      num_stages, " stages for the ", effective, " effective layers (L ", num_layers, " + ",
      keys.first_stage_less_layers, " ", first, " + ", keys.last_stage_less_layers, " ", last, ")");
  if (num_stages > effective) {
    return Result::refused(detail::concat(seen, " leave a stage empty; lower ", keys.pp,
                                          " or the stages per rank (", keys.layers_per_stage,
                                          "), or raise the weights"));
  }
  const int64_t share = effective / num_stages;  // the smallest share; the first `extra` get +1
  const int64_t extra = effective % num_stages;
  if (first > share || last > share) {
    return Result::refused(
        detail::concat(seen, " give each stage at least ", share, " layers, and ",
                       first > share ? keys.first_stage_less_layers : keys.last_stage_less_layers,
                       " ", first > share ? first : last, " exceeds that; lower it to ", share,
                       " or less, or use fewer stages"));
  }

  std::vector<StageLayers> stages;
  int64_t next_layer = 0;
  for (int64_t s = 0; s < num_stages; ++s) {
    int64_t layers = share + (s < extra ? 1 : 0);
    StageLayers stage;
    stage.embedding = s == 0;
    stage.output = s == num_stages - 1;
    if (stage.embedding) layers -= first;
    if (stage.output) layers -= last;
    stage.first_layer = next_layer;
    stage.end_layer = next_layer + layers;
    next_layer = stage.end_layer;
    stages.push_back(stage);
  }
  TT_CHECK(next_layer == num_layers, "pipeline split dealt out ", next_layer, " of ", num_layers,
           " layers");
  return stages;
}

std::string describe(const StageLayers& stage) {
  std::string text;
  if (stage.embedding) text += "embedding";
  if (stage.num_layers() > 0) {
    if (!text.empty()) text += " + ";
    text += stage.num_layers() == 1
                ? detail::concat("layer ", stage.first_layer)
                : detail::concat("layers ", stage.first_layer, "-", stage.end_layer - 1);
  }
  if (stage.output) text += text.empty() ? "norm/output" : " + norm/output";
  return text;
}

}  // namespace titan::parallel::pipeline
