// A measured run put back through the simulator (parallel/pipeline/run_replay.h): a run in the
// list's order at the kinds' costs is the simulation itself; one slow action delays exactly the
// ranks that wait on it, against a timeline worked by hand; a W the executor ran early lands
// after the sends and before the receives of the compute it stood in for; and an order no
// executor could have run is refused in one line.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "parallel/pipeline/run_replay.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "support/text.h"

using namespace titan::parallel::pipeline;

namespace {

using titan::testing::contains;
using Ran = std::vector<std::vector<RanCompute>>;  // [pp] computes in the order they ran

PipelineSchedule schedule_of(ScheduleKind kind, int64_t pp, int64_t v, int64_t m) {
  ValueOrRefusal<PipelineSchedule> schedule = generate_schedule(kind, pp, v, m);
  REQUIRE_MESSAGE(schedule.ok(), schedule.error());
  return schedule.value();
}

// Every rank's computes in the list's order, each at its kind's cost.
Ran in_list_order(const PipelineSchedule& schedule, const SimulationCosts& costs) {
  Ran ran(schedule.ranks.size());
  for (size_t r = 0; r < ran.size(); ++r) {
    const std::vector<Action>& list = schedule.ranks[r];
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k].is_compute()) ran[r].push_back({static_cast<int64_t>(k), costs.of(list[k].kind)});
    }
  }
  return ran;
}

std::string refusal(const PipelineSchedule& schedule, const Ran& ran) {
  ValueOrRefusal<Simulation> replayed = replay_run(schedule, ran);
  REQUIRE_FALSE(replayed.ok());
  CHECK(replayed.error().find('\n') == std::string::npos);
  return replayed.error();
}

TEST_SUITE("fast") {
  TEST_CASE("pipeline replay: a run in the list's order at the kinds' costs is the simulation") {
    const SimulationCosts costs{3, 7, 4, 2};
    for (ScheduleKind kind :
         {ScheduleKind::GPIPE, ScheduleKind::ONE_F_ONE_B, ScheduleKind::INTERLEAVED_1F1B,
          ScheduleKind::INTERLEAVED_ZERO_BUBBLE, ScheduleKind::ZBV_ZERO_BUBBLE}) {
      const bool looped = kind != ScheduleKind::GPIPE && kind != ScheduleKind::ONE_F_ONE_B;
      const PipelineSchedule schedule = schedule_of(kind, 4, looped ? 2 : 1, 8);
      CAPTURE(kScheduleKindNames.name(kind));
      const Ran ran = in_list_order(schedule, costs);
      ValueOrRefusal<PipelineSchedule> lists = as_run(schedule, ran);
      REQUIRE_MESSAGE(lists.ok(), lists.error());
      CHECK(lists.value().ranks == schedule.ranks);
      ValueOrRefusal<Simulation> replayed = replay_run(schedule, ran);
      REQUIRE_MESSAGE(replayed.ok(), replayed.error());
      ValueOrRefusal<Simulation> simulated = simulate(schedule, costs);
      REQUIRE(simulated.ok());
      CHECK(replayed.value().makespan == simulated.value().makespan);
      CHECK(replayed.value().bubble == simulated.value().bubble);
      ValueOrRefusal<double> twice = replayed_bubble(schedule, {ran, ran});
      REQUIRE(twice.ok());
      CHECK(twice.value() == doctest::Approx(simulated.value().bubble).epsilon(1e-12));
    }
  }

  TEST_CASE("pipeline replay: one slow action delays exactly the ranks that wait on it") {
    // GPipe, pp 2, m 2, F = B = 1. As listed: rank 0 F0 [0,1) F1 [1,2), rank 1 F0 [1,2) F1 [2,3)
    // B0 [3,4) B1 [4,5), rank 0 B0 [4,5) B1 [5,6): makespan 6. Rank 1's F0 taking 3: rank 1 F0
    // [1,4) F1 [4,5) B0 [5,6) B1 [6,7), rank 0 B0 [6,7) B1 [7,8): makespan 8, rank 0 busy 4 and
    // rank 1 busy 6, so idle 2·8 − 10 = 6 of 16.
    const PipelineSchedule schedule = schedule_of(ScheduleKind::GPIPE, 2, 1, 2);
    Ran ran = in_list_order(schedule, SimulationCosts{1, 1, 1, 1});
    REQUIRE(simulate(schedule, SimulationCosts{1, 1, 1, 1}).value().makespan == 6);
    REQUIRE(schedule.ranks[1][static_cast<size_t>(ran[1][0].index)] ==
            Action{ActionKind::FORWARD, 1, 0, -1});
    ran[1][0].cost = 3;
    ValueOrRefusal<Simulation> replayed = replay_run(schedule, ran);
    REQUIRE_MESSAGE(replayed.ok(), replayed.error());
    CHECK(replayed.value().makespan == 8);
    CHECK(replayed.value().ranks[0].busy == 4);
    CHECK(replayed.value().ranks[1].busy == 6);
    CHECK(replayed.value().bubble == doctest::Approx(6.0 / 16.0).epsilon(1e-12));
  }

  TEST_CASE(
      "pipeline replay: a W run early lands after the sends and before the receives of the "
      "compute it stood in for") {
    // InterleavedZeroBubble, pp 2, v 2, m 4: on a rank, the first compute whose block before it
    // (the actions since the compute before) holds a receive, with a W of an earlier I further
    // on. The run moves that W ahead of the compute, as the executor does when the receive is
    // late.
    const PipelineSchedule schedule = schedule_of(ScheduleKind::INTERLEAVED_ZERO_BUBBLE, 2, 2, 4);
    int moved = 0;
    for (size_t r = 0; r < schedule.ranks.size(); ++r) {
      const std::vector<Action>& list = schedule.ranks[r];
      for (size_t i = 1; i < list.size(); ++i) {
        if (!list[i].is_compute()) continue;
        size_t block = i;  // the first action after the compute before i
        while (block > 0 && !list[block - 1].is_compute()) --block;
        bool receives = false;
        for (size_t k = block; k < i; ++k) receives = receives || !list[k].is_send();
        if (!receives) continue;
        // A W later in the list whose I has run before i.
        size_t w = list.size();
        for (size_t j = i + 1; j < list.size() && w == list.size(); ++j) {
          if (list[j].kind != ActionKind::BACKWARD_WEIGHT) continue;
          for (size_t k = 0; k < block; ++k) {
            if (list[k].kind == ActionKind::BACKWARD_INPUT && list[k].stage == list[j].stage &&
                list[k].microbatch == list[j].microbatch) {
              w = j;
            }
          }
        }
        if (w == list.size()) continue;
        CAPTURE(r);
        CAPTURE(to_string(list[i]));
        CAPTURE(to_string(list[w]));
        Ran ran = in_list_order(schedule, SimulationCosts{});
        std::vector<RanCompute>& mine = ran[r];
        auto at = [&](size_t index) {
          for (size_t n = 0; n < mine.size(); ++n) {
            if (mine[n].index == static_cast<int64_t>(index)) return n;
          }
          FAIL("no compute ", index);
          return mine.size();
        };
        const RanCompute early = mine[at(w)];
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(at(w)));
        mine.insert(mine.begin() + static_cast<std::ptrdiff_t>(at(i)), early);

        ValueOrRefusal<PipelineSchedule> lists = as_run(schedule, ran);
        REQUIRE_MESSAGE(lists.ok(), lists.error());
        std::vector<Action> want(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(block));
        for (size_t k = block; k < i; ++k) {
          if (list[k].is_send()) want.push_back(list[k]);
        }
        want.push_back(list[w]);
        for (size_t k = block; k < i; ++k) {
          if (!list[k].is_send()) want.push_back(list[k]);
        }
        for (size_t k = i; k < list.size(); ++k) {
          if (k != w) want.push_back(list[k]);
        }
        CHECK(lists.value().ranks[r] == want);
        for (size_t other = 0; other < schedule.ranks.size(); ++other) {
          if (other != r) CHECK(lists.value().ranks[other] == schedule.ranks[other]);
        }
        ValueOrRefusal<Simulation> replayed = replay_run(schedule, ran);
        CHECK_MESSAGE(replayed.ok(), replayed.error());
        ++moved;
        break;
      }
    }
    // Rank 1 only: rank 0 runs each W right after its I (torch's list defers rank r's Ws by r
    // steps), so no W of rank 0 has a receive to stand in front of.
    CHECK(moved == 1);
  }

  TEST_CASE("pipeline replay: an order no executor runs is refused in one line") {
    const PipelineSchedule schedule = schedule_of(ScheduleKind::ONE_F_ONE_B, 2, 1, 4);
    const Ran ran = in_list_order(schedule, SimulationCosts{});

    CHECK(contains(refusal(schedule, {ran[0]}), "the run of 1 ranks for a schedule of pp 2"));

    Ran twice = ran;
    twice[0].push_back(twice[0].front());
    CHECK(contains(refusal(schedule, twice), "rank 0 ran action 0 (F s0 m0) twice"));

    Ran swapped = ran;  // a forward ahead of the compute before it: only a W may pass
    std::swap(swapped[1][0], swapped[1][1]);
    CHECK(contains(refusal(schedule, swapped), "rank 1 ran action"));
    CHECK(contains(refusal(schedule, swapped), "which precedes it"));

    Ran short_run = ran;
    short_run[1].pop_back();
    CHECK(contains(refusal(schedule, short_run), "rank 1 never ran action"));

    Ran message = ran;  // a receive's index given as a compute
    for (size_t k = 0; k < schedule.ranks[1].size(); ++k) {
      if (!schedule.ranks[1][k].is_compute()) {
        message[1][0].index = static_cast<int64_t>(k);
        break;
      }
    }
    CHECK(contains(refusal(schedule, message), "as a compute"));

    Ran negative = ran;
    negative[0][0].cost = -1;
    CHECK(contains(refusal(schedule, negative), "in -1 time units"));
  }

  TEST_CASE("pipeline simulator: own costs must cover every action of every rank") {
    const PipelineSchedule schedule = schedule_of(ScheduleKind::ONE_F_ONE_B, 2, 1, 2);
    std::vector<std::vector<int64_t>> costs = {std::vector<int64_t>(schedule.ranks[0].size(), 1)};
    ValueOrRefusal<Simulation> one_rank = simulate(schedule, costs);
    REQUIRE_FALSE(one_rank.ok());
    CHECK(contains(one_rank.error(), "own costs for 1 ranks, the list has 2"));
    costs.push_back(std::vector<int64_t>(schedule.ranks[1].size() - 1, 1));
    ValueOrRefusal<Simulation> short_rank = simulate(schedule, costs);
    REQUIRE_FALSE(short_rank.ok());
    CHECK(contains(short_rank.error(), "rank 1: "));
  }

}  // TEST_SUITE

}  // namespace
