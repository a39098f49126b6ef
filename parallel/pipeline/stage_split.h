// Which layers each pipeline stage holds, by torchtitan's rules (generate_llm_fqn_per_model_part
// and the stage count of pipeline_llm), so that a titan_train pipeline splits a model exactly as
// torchtitan splits the same model with the same options.
//
// The model is the embedding, L transformer layers, and norm+output. For balance the embedding
// counts as first_stage_less_layers layers and norm+output as last_stage_less_layers layers:
// the "effective layers" are L + first + last (L + 2 by default), dealt out as evenly as
// possible over the stages, the first stages taking one more where they do not divide; the first
// stage's share is the embedding and (share − first) transformer layers, the last stage's the
// (share − last) layers before norm+output.
//
// Refusals are one line naming the options to change. The option names come from the caller
// (StageSplitKeys), as data/ takes its key names: this layer never names a titan_train key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/value_or_refusal.h"

namespace titan::parallel::pipeline {

struct StageSplitOptions {
  int64_t layers_per_stage = 0;         // effective layers per stage; 0: derive the stage count
  int64_t first_stage_less_layers = 1;  // what the embedding counts as, in layers
  int64_t last_stage_less_layers = 1;   // what norm+output counts as, in layers
};

// The names the caller's refusals should give each option ("--parallelism.pp", …).
struct StageSplitKeys {
  std::string pp;
  std::string layers_per_stage;
  std::string first_stage_less_layers;
  std::string last_stage_less_layers;
};

// What one stage holds: transformer layers [first_layer, end_layer), and whether it holds the
// embedding (only stage 0) and norm+output (only the last stage).
struct StageLayers {
  int64_t first_layer = 0;
  int64_t end_layer = 0;
  bool embedding = false;
  bool output = false;

  int64_t num_layers() const { return end_layer - first_layer; }
  bool operator==(const StageLayers&) const = default;
};

// The number of stages each of the pp ranks holds (v). With layers_per_stage 0 it is the
// schedule's default: 1 for a single-stage schedule, 2 for a multi-stage one. Otherwise it is
// ceil((L + first + last) / layers_per_stage) stages over pp ranks, which must divide evenly and
// give exactly 1 per rank (single-stage schedule) or at least 2 (multi-stage).
ValueOrRefusal<int64_t> stages_per_rank_for(int64_t num_layers, int64_t pp,
                                            bool single_stage_schedule,
                                            const StageSplitOptions& options,
                                            const StageSplitKeys& keys);

// The layers of each of num_stages stages (pp × v). One stage holds the whole model. Refused
// when a stage would be empty, or when the embedding's or norm+output's weight exceeds the
// smallest share of effective layers (torchtitan's balance check).
ValueOrRefusal<std::vector<StageLayers>> split_stages(int64_t num_layers, int64_t num_stages,
                                                      const StageSplitOptions& options,
                                                      const StageSplitKeys& keys);

// "embedding + layers 0-2", "layers 3-5", "layers 6-7 + norm/output": what a stage holds, for
// logs and the schedule printer.
std::string describe(const StageLayers& stage);

}  // namespace titan::parallel::pipeline
