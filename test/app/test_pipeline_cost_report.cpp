// The pipeline's closing line (app/pipeline_cost_report.h) from summed figures, with no job:
// the mean cost of each kind of compute, the schedule simulated with them, the measured bubble,
// the Ws run early; and the runs a step keeps for the replay.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "app/pipeline_cost_report.h"
#include "parallel/pipeline/run_replay.h"
#include "parallel/pipeline/schedule.h"

namespace titan::app {
namespace {

namespace pipeline = parallel::pipeline;

TEST_SUITE("fast") {
  TEST_CASE("pipeline cost report: the line from the summed figures of two ranks") {
    const pipeline::PipelineSchedule schedule =
        pipeline::generate_schedule(pipeline::ScheduleKind::INTERLEAVED_ZERO_BUBBLE, 2, 2, 4)
            .value();
    PipelineCosts costs;
    // Over both ranks: 16 forwards of 2 ms, 16 I of 1 ms and 16 W of 0.5 ms; 0.1 s in lists
    // of which 0.02 s waiting, the slowest rank 0.06 s; 3 of the 16 W ran early.
    costs.summed.compute_seconds = {0.032, 0, 0.016, 0.008};
    costs.summed.computes = {16, 0, 16, 16};
    costs.summed.seconds = 0.1;
    costs.summed.wait_seconds = 0.02;
    costs.summed.weight_grads_run_early = 3;
    costs.slowest_seconds = 0.06;
    const std::optional<std::string> line =
        pipeline_cost_line(costs, schedule, 2, ", and with each action's own time 0.250");
    REQUIRE(line.has_value());
    CHECK(line->rfind("pipeline: one stage on one microbatch took F 2.00 ms, B 0.00 ms, I 1.00 "
                      "ms, W 0.50 ms (mean over ranks and steps after the first); simulated with "
                      "these costs the schedule idles ",
                      0) == 0);
    // measured_bubble(0.1, 0.02, 2, 0.06) = 1 − (0.1 − 0.02) / (2 × 0.06) = 0.333.
    CHECK(line->find(" of the time, and with each action's own time 0.250; measured 0.333; 3 of "
                     "the 16 W ran early, in place of a wait") != std::string::npos);
    costs.summed.seconds = 0;  // a run of one step: nothing timed
    CHECK_FALSE(pipeline_cost_line(costs, schedule, 2, "").has_value());
  }

  TEST_CASE("pipeline cost report: the runs keep every run's sums and the last 64 orders") {
    PipelineRuns runs;
    parallel::PipelineTiming timing;
    timing.seconds = 1;
    timing.computes = {1, 1, 0, 0};
    for (int i = 0; i < 70; ++i) {
      timing.ran = {{i, 10}};
      runs.add(timing);
    }
    CHECK(runs.total.seconds == 70);
    CHECK(runs.total.computes[0] == 70);
    REQUIRE(runs.ran.size() == PipelineRuns::kReplayed);
    CHECK(runs.ran.front().front().index == 6);
    CHECK(runs.ran.back().front().index == 69);
  }
}

}  // namespace
}  // namespace titan::app
