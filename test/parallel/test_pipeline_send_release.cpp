// When the memory plan lets a sent tensor go over NCCL (parallel/pipeline/send_release.h): 1F1B
// on pp 2 with 4 microbatches against a timeline worked by hand, and for every schedule on pp 2,
// 3 and 4 what the plan leans on: each send goes before a compute that starts after the send was
// posted, or at the list's end, where only a few of them stay.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "parallel/pipeline/send_release.h"

using namespace titan::parallel::pipeline;

namespace {

PipelineSchedule listed_schedule(ScheduleKind kind, int64_t pp, int64_t v, int64_t m) {
  ValueOrRefusal<PipelineSchedule> schedule = generate_schedule(kind, pp, v, m);
  REQUIRE_MESSAGE(schedule.ok(), schedule.error());
  return schedule.value();
}

Simulation proven_simulation(const PipelineSchedule& schedule) {
  ValueOrRefusal<Simulation> simulation = simulate(schedule);
  REQUIRE_MESSAGE(simulation.ok(), simulation.error());
  return simulation.value();
}

// Rank r's sends, each with the compute it goes before ("end": the list's end).
std::map<std::string, std::string> released(const PipelineSchedule& schedule,
                                            const std::vector<std::vector<int64_t>>& points,
                                            size_t r) {
  std::map<std::string, std::string> out;
  const std::vector<Action>& list = schedule.ranks[r];
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_send()) {
      CHECK(points[r][i] == -1);
      continue;
    }
    const auto at = static_cast<size_t>(points[r][i]);
    out[to_string(list[i])] = at == list.size() ? "end" : to_string(list[at]);
  }
  return out;
}

TEST_SUITE("fast") {
  TEST_CASE("send release: 1F1B on pp 2 with 4 microbatches against a timeline worked by hand") {
    // F 1, B 2. Rank 0: F0 [0,1) F1 [1,2) B0 [4,6) F2 [6,7) B1 [7,9) F3 [9,10) B2 [10,12)
    // B3 [13,15); rank 1: F0 [1,2) B0 [2,4) F1 [4,5) B1 [5,7) F2 [7,8) B2 [8,10) F3 [10,11)
    // B3 [11,13). Rank 1 posts its receives at 0 (before any compute) and at the starts of B0,
    // B1 and B2 (2, 5, 8); rank 0 at the starts of F1, F2, F3 and B2 (1, 6, 9, 10).
    const PipelineSchedule schedule = listed_schedule(ScheduleKind::ONE_F_ONE_B, 2, 1, 4);
    const std::vector<std::vector<int64_t>> points =
        send_release_points(schedule, proven_simulation(schedule));
    // act m0 sent at 1, received by then: held across F1 (which starts at 1). act m2 sent at 7,
    // its receive posted at 5: held across B1 (7). act m3 at 10 across B2 (10).
    CHECK(released(schedule, points, 0) ==
          std::map<std::string, std::string>{{"SEND_ACT s0 m0 to r1", "B s0 m0"},
                                             {"SEND_ACT s0 m1 to r1", "B s0 m0"},
                                             {"SEND_ACT s0 m2 to r1", "F s0 m3"},
                                             {"SEND_ACT s0 m3 to r1", "B s0 m3"}});
    // grad m0 sent at 4 (receive posted at 1): across F1 (4), gone before B1 (5); grad m3 sent
    // at 13 after the list's last compute has started: held to the end.
    CHECK(released(schedule, points, 1) ==
          std::map<std::string, std::string>{{"SEND_GRAD s1 m0 to r0", "B s1 m1"},
                                             {"SEND_GRAD s1 m1 to r0", "B s1 m2"},
                                             {"SEND_GRAD s1 m2 to r0", "B s1 m3"},
                                             {"SEND_GRAD s1 m3 to r0", "end"}});
  }

  TEST_CASE(
      "send release: every schedule's sends stay past the compute after them and few to the end") {
    for (ScheduleKind kind :
         {ScheduleKind::GPIPE, ScheduleKind::ONE_F_ONE_B, ScheduleKind::INTERLEAVED_1F1B,
          ScheduleKind::INTERLEAVED_ZERO_BUBBLE, ScheduleKind::ZBV_ZERO_BUBBLE}) {
      for (int64_t pp : {2, 3, 4}) {
        const bool looped = !is_single_stage(kind);
        const PipelineSchedule schedule = listed_schedule(kind, pp, looped ? 2 : 1, 2 * pp);
        const Simulation simulation = proven_simulation(schedule);
        CAPTURE(kScheduleKindNames.name(kind));
        CAPTURE(pp);
        const std::vector<std::vector<int64_t>> points = send_release_points(schedule, simulation);
        REQUIRE(points.size() == schedule.ranks.size());
        int64_t held_to_end = 0, sends = 0;
        for (size_t r = 0; r < points.size(); ++r) {
          const std::vector<Action>& list = schedule.ranks[r];
          REQUIRE(points[r].size() == list.size());
          // Each compute's start, by list index.
          std::vector<int64_t> start(list.size(), -1);
          size_t k = 0;
          for (size_t i = 0; i < list.size(); ++i) {
            if (list[i].is_compute()) start[i] = simulation.timeline[r][k++].start;
          }
          for (size_t i = 0; i < list.size(); ++i) {
            if (!list[i].is_send()) continue;
            ++sends;
            const int64_t at = points[r][i];
            CAPTURE(to_string(list[i]));
            REQUIRE(at > static_cast<int64_t>(i));
            REQUIRE(at <= static_cast<int64_t>(list.size()));
            if (at == static_cast<int64_t>(list.size())) {
              ++held_to_end;
              continue;
            }
            CHECK(list[static_cast<size_t>(at)].is_compute());
            // A compute that starts strictly after the one that made the tensor ended: the
            // transfer overlaps what runs next.
            int64_t made_end = 0;
            size_t c = 0;
            for (size_t j = 0; j < i; ++j) {
              if (list[j].is_compute()) made_end = simulation.timeline[r][c++].end;
            }
            CHECK(start[static_cast<size_t>(at)] > made_end);
          }
        }
        // Only the sends near each list's end stay to it: a transport that frees a send when it
        // is done holds far fewer than MPI's list of them.
        CHECK(sends > 0);
        CHECK(held_to_end < sends);
      }
    }
  }
}

}  // namespace
