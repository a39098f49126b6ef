// Which layers each pipeline stage holds (parallel/pipeline/stage_split.h) and which rank holds
// each stage (stage_placement.h). The split cases are torchtitan's: its docstring's example and
// splits worked by its generate_llm_fqn_per_model_part for the same arguments, written out as
// (first layer, end layer, embedding, norm+output) per stage.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "parallel/pipeline/stage_placement.h"
#include "parallel/pipeline/stage_split.h"
#include "support/text.h"

using namespace titan::parallel::pipeline;

namespace {

using titan::testing::contains;

const StageSplitKeys kKeys{"--pp", "--layers_per_stage", "--first_less", "--last_less"};

std::vector<StageLayers> split(int64_t layers, int64_t stages, int64_t first = 1,
                               int64_t last = 1) {
  StageSplitOptions options;
  options.first_stage_less_layers = first;
  options.last_stage_less_layers = last;
  ValueOrRefusal<std::vector<StageLayers>> result = split_stages(layers, stages, options, kKeys);
  REQUIRE_MESSAGE(result.ok(), result.error());
  return result.value();
}

std::string refusal_of_split(int64_t layers, int64_t stages, int64_t first = 1, int64_t last = 1) {
  StageSplitOptions options;
  options.first_stage_less_layers = first;
  options.last_stage_less_layers = last;
  ValueOrRefusal<std::vector<StageLayers>> result = split_stages(layers, stages, options, kKeys);
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().find('\n') == std::string::npos);
  return result.error();
}

StageLayers layers(int64_t first, int64_t end, bool embedding = false, bool output = false) {
  return StageLayers{first, end, embedding, output};
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "pipeline split: torchtitan's docstring example of 2 stages and 3 layers weighted 2 and 2") {
    // 3 + 2 + 2 = 7 effective layers: stage 0 takes 4 (the embedding's 2 and layers 0-1),
    // stage 1 takes 3 (layer 2 and norm+output's 2).
    CHECK(split(3, 2, 2, 2) == std::vector{layers(0, 2, true), layers(2, 3, false, true)});
  }

  TEST_CASE("pipeline split: torchtitan's even and uneven splits") {
    CHECK(split(4, 2) == std::vector{layers(0, 2, true), layers(2, 4, false, true)});
    // 10 effective layers on 4 stages: shares 3, 3, 2, 2.
    CHECK(split(8, 4) ==
          std::vector{layers(0, 2, true), layers(2, 5), layers(5, 7), layers(7, 8, false, true)});
    // Llama 3 8B on 8 stages: 34 effective layers, shares 5, 5, 4, …
    CHECK(split(32, 8) == std::vector{layers(0, 4, true), layers(4, 9), layers(9, 13),
                                      layers(13, 17), layers(17, 21), layers(21, 25),
                                      layers(25, 29), layers(29, 32, false, true)});
    // Llama 3 405B on 8 stages: 128 effective layers, 16 each.
    const std::vector<StageLayers> big = split(126, 8);
    CHECK(big.front() == layers(0, 15, true));
    CHECK(big[1] == layers(15, 31));
    CHECK(big.back() == layers(111, 126, false, true));
    CHECK(split(13, 4, 2, 1) == std::vector{layers(0, 2, true), layers(2, 6), layers(6, 10),
                                            layers(10, 13, false, true)});
  }

  TEST_CASE("pipeline split: a stage may hold only the embedding or only norm and output") {
    // 8 effective layers on 8 stages: one each.
    const std::vector<StageLayers> stages = split(6, 8);
    REQUIRE(stages.size() == 8);
    CHECK(stages.front() == layers(0, 0, true));
    CHECK(stages[1] == layers(0, 1));
    CHECK(stages.back() == layers(6, 6, false, true));
    CHECK(describe(stages.front()) == "embedding");
    CHECK(describe(stages[1]) == "layer 0");
    CHECK(describe(stages.back()) == "norm/output");
    CHECK(describe(split(8, 4)[0]) == "embedding + layers 0-1");
  }

  TEST_CASE("pipeline split: one stage holds the whole model") {
    CHECK(split(16, 1) == std::vector{layers(0, 16, true, true)});
  }

  TEST_CASE("pipeline split: every layer lands on exactly one stage in order") {
    for (int64_t layers_total : {1, 2, 5, 16, 31, 32, 80}) {
      for (int64_t stages = 1; stages <= layers_total + 2; ++stages) {
        StageSplitOptions options;
        ValueOrRefusal<std::vector<StageLayers>> result =
            split_stages(layers_total, stages, options, kKeys);
        REQUIRE_MESSAGE(result.ok(), result.error());
        int64_t next = 0;
        for (const StageLayers& stage : result.value()) {
          CHECK(stage.first_layer == next);
          CHECK(stage.num_layers() >= 0);
          next = stage.end_layer;
        }
        CHECK(next == layers_total);
        CHECK(result.value().front().embedding);
        CHECK(result.value().back().output);
      }
    }
  }

  TEST_CASE("pipeline split: refusals name the options to change") {
    // More stages than effective layers: 4 + 1 + 1 = 6 < 8.
    std::string error = refusal_of_split(4, 8);
    CHECK(contains(error, "8 stages for the 6 effective layers"));
    CHECK(contains(error, "--pp"));
    CHECK(contains(error, "--layers_per_stage"));
    // The embedding's weight 3 exceeds the smallest share: 2 + 3 + 1 = 6 on 4 stages is 1 each.
    error = refusal_of_split(2, 4, 3, 1);
    CHECK(contains(error, "--first_less 3 exceeds that"));
    CHECK(contains(error, "lower it to 1"));
    error = refusal_of_split(2, 4, 1, 3);
    CHECK(contains(error, "--last_less 3 exceeds that"));
    CHECK(contains(refusal_of_split(4, 2, -1, 1), "--first_less -1"));
    CHECK(contains(refusal_of_split(0, 2), "0 transformer layers"));
  }

  TEST_CASE("pipeline split: the stage count from layers_per_stage follows torchtitan") {
    StageSplitOptions options;
    // Default: 1 stage per rank for single-stage schedules, 2 for multi-stage ones.
    CHECK(stages_per_rank_for(32, 4, true, options, kKeys).value() == 1);
    CHECK(stages_per_rank_for(32, 4, false, options, kKeys).value() == 2);
    // ceil(34 / 5) = 7 stages: not a multiple of pp 4.
    options.layers_per_stage = 5;
    ValueOrRefusal<int64_t> result = stages_per_rank_for(32, 4, false, options, kKeys);
    REQUIRE_FALSE(result.ok());
    CHECK(contains(result.error(),
                   "--layers_per_stage 5 gives 7 stages for the 34 effective layers"));
    CHECK(contains(result.error(), "multiple of --pp"));
    // ceil(34 / 3) = 12 stages on pp 4: 3 per rank.
    options.layers_per_stage = 3;
    CHECK(stages_per_rank_for(32, 4, false, options, kKeys).value() == 3);
    result = stages_per_rank_for(32, 4, true, options, kKeys);
    REQUIRE_FALSE(result.ok());
    CHECK(contains(result.error(), "single-stage schedule holds exactly 1"));
    // ceil(34 / 9) = 4 stages on pp 4: 1 per rank, too few for a multi-stage schedule.
    options.layers_per_stage = 9;
    CHECK(stages_per_rank_for(32, 4, true, options, kKeys).value() == 1);
    result = stages_per_rank_for(32, 4, false, options, kKeys);
    REQUIRE_FALSE(result.ok());
    CHECK(contains(result.error(), "multi-stage schedule needs at least 2"));
    options.layers_per_stage = -1;
    CHECK(
        contains(stages_per_rank_for(32, 4, false, options, kKeys).error(), "--layers_per_stage"));
  }

  TEST_CASE("pipeline placement: looped stages go round the ranks and V stages go down and back") {
    const StagePlacement loop(PlacementStyle::LOOP, 4, 2);
    CHECK(loop.num_stages() == 8);
    CHECK(loop.stages_of(1) == std::vector<int64_t>{1, 5});
    CHECK(loop.rank_of(6) == 2);
    const StagePlacement v(PlacementStyle::V, 4, 2);
    CHECK(v.stages_of(0) == std::vector<int64_t>{0, 7});
    CHECK(v.stages_of(3) == std::vector<int64_t>{3, 4});
    for (int64_t rank = 0; rank < 4; ++rank) {
      for (int64_t stage : v.stages_of(rank)) CHECK(v.rank_of(stage) == rank);
      for (int64_t stage : loop.stages_of(rank)) CHECK(loop.rank_of(stage) == rank);
    }
  }
}
