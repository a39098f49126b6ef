// Pipeline schedules as data (parallel/pipeline/): the generator's lists for small cases against
// tables worked by hand from torch.distributed.pipelining's orders, the simulator's proof of
// every list over pp 2, 4 and 8 and many microbatch counts, its figures against closed forms,
// and its refusals of lists broken by hand.
//
// Costs are in time units and stated at each check. "Unit costs" (F = B = I = W = 1) keep the
// hand-worked tables short; the default costs (F 1, B 2 = I 1 + W 1) are the zero-bubble
// papers' model, a backward twice a forward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "parallel/pipeline/schedule_table.h"
#include "support/text.h"

using namespace titan::parallel::pipeline;

namespace {

using titan::testing::contains;

constexpr SimulationCosts kUnitCosts{1, 1, 1, 1};

PipelineSchedule make(ScheduleKind kind, int64_t pp, int64_t v, int64_t m) {
  ValueOrRefusal<PipelineSchedule> schedule = generate_schedule(kind, pp, v, m);
  REQUIRE_MESSAGE(schedule.ok(), schedule.error());
  return schedule.value();
}

Simulation run(const PipelineSchedule& schedule, const SimulationCosts& costs = {}) {
  ValueOrRefusal<Simulation> simulation = simulate(schedule, costs);
  REQUIRE_MESSAGE(simulation.ok(), simulation.error());
  return simulation.value();
}

std::string table(ScheduleKind kind, int64_t pp, int64_t v, int64_t m,
                  const SimulationCosts& costs) {
  const PipelineSchedule schedule = make(kind, pp, v, m);
  return schedule_table(schedule, run(schedule, costs));
}

// The refusal of a list broken by hand: one line.
std::string refusal(const PipelineSchedule& schedule) {
  ValueOrRefusal<Simulation> simulation = simulate(schedule);
  REQUIRE_FALSE(simulation.ok());
  CHECK(simulation.error().find('\n') == std::string::npos);
  return simulation.error();
}

int64_t peak(const Simulation& simulation) {
  int64_t most = 0;
  for (const RankFigures& rank : simulation.ranks) most = std::max(most, rank.peak_held);
  return most;
}

int64_t idle(const Simulation& simulation) {
  int64_t total = 0;
  for (const RankFigures& rank : simulation.ranks) total += rank.idle;
  return total;
}

constexpr ScheduleKind kAllKinds[] = {
    ScheduleKind::GPIPE, ScheduleKind::ONE_F_ONE_B, ScheduleKind::INTERLEAVED_1F1B,
    ScheduleKind::INTERLEAVED_ZERO_BUBBLE, ScheduleKind::ZBV_ZERO_BUBBLE};

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("pipeline schedule: names parse as torch spells them and nothing else") {
    for (ScheduleKind kind : kAllKinds) {
      CHECK(parse_schedule_kind(kScheduleKindNames.name(kind), "--schedule").value() == kind);
    }
    ValueOrRefusal<ScheduleKind> bad = parse_schedule_kind("ZeroBubble", "--schedule");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error() ==
          "--schedule: unknown pipeline schedule 'ZeroBubble'; use GPipe, 1F1B, Interleaved1F1B, "
          "InterleavedZeroBubble or ZBVZeroBubble");
  }

  TEST_CASE("pipeline schedule: 1F1B on pp 2 with 4 microbatches as action lists") {
    // Rank 0 warms up with pp − 0 = 2 forwards, rank 1 with 1; then backward and forward
    // alternate. A receive comes right before the compute that needs it, a send right after the
    // compute that produces it.
    const PipelineSchedule schedule = make(ScheduleKind::ONE_F_ONE_B, 2, 1, 4);
    const std::vector<std::string> expected = {
        "F s0 m0|SEND_ACT s0 m0 to r1|F s0 m1|SEND_ACT s0 m1 to r1|RECV_GRAD s0 m0 from r1|"
        "B s0 m0|F s0 m2|SEND_ACT s0 m2 to r1|RECV_GRAD s0 m1 from r1|B s0 m1|F s0 m3|"
        "SEND_ACT s0 m3 to r1|RECV_GRAD s0 m2 from r1|B s0 m2|RECV_GRAD s0 m3 from r1|B s0 m3",
        "RECV_ACT s1 m0 from r0|F s1 m0|B s1 m0|SEND_GRAD s1 m0 to r0|RECV_ACT s1 m1 from r0|"
        "F s1 m1|B s1 m1|SEND_GRAD s1 m1 to r0|RECV_ACT s1 m2 from r0|F s1 m2|B s1 m2|"
        "SEND_GRAD s1 m2 to r0|RECV_ACT s1 m3 from r0|F s1 m3|B s1 m3|SEND_GRAD s1 m3 to r0"};
    REQUIRE(schedule.ranks.size() == 2);
    for (size_t r = 0; r < 2; ++r) {
      std::string text;
      for (const Action& action : schedule.ranks[r]) {
        if (!text.empty()) text += "|";
        text += to_string(action);
      }
      CHECK(text == expected[r]);
    }
    CHECK(table(ScheduleKind::ONE_F_ONE_B, 2, 1, 4, kUnitCosts) ==
          R"(1F1B, pp 2, v 1, m 4; costs F 1, B 1, I 1, W 1
t  rank 0   rank 1
0  F s0 m0  .
1  F s0 m1  F s1 m0
2  .        B s1 m0
3  B s0 m0  F s1 m1
4  F s0 m2  B s1 m1
5  B s0 m1  F s1 m2
6  F s0 m3  B s1 m2
7  B s0 m2  F s1 m3
8  .        B s1 m3
9  B s0 m3  .
makespan 10, bubble 0.200 (idle / (ranks x makespan))
bubble per rank: r0 0.200, r1 0.200
peak held microbatches per rank: r0 2, r1 1
)");
  }

  TEST_CASE("pipeline schedule: GPipe on pp 2 with 2 microbatches as a table") {
    CHECK(table(ScheduleKind::GPIPE, 2, 1, 2, kUnitCosts) ==
          R"(GPipe, pp 2, v 1, m 2; costs F 1, B 1, I 1, W 1
t  rank 0   rank 1
0  F s0 m0  .
1  F s0 m1  F s1 m0
2  .        F s1 m1
3  .        B s1 m0
4  B s0 m0  B s1 m1
5  B s0 m1  .
makespan 6, bubble 0.333 (idle / (ranks x makespan))
bubble per rank: r0 0.333, r1 0.333
peak held microbatches per rank: r0 2, r1 2
)");
  }

  TEST_CASE(
      "pipeline schedule: Interleaved1F1B on pp 2 with 2 stages per rank and 4 microbatches") {
    // Rounds of pp = 2 microbatches: rank 0 (stages 0 and 2) warms up with (v − 1)·2 + 2 = 4
    // forwards, rank 1 (stages 1 and 3) with 2; backwards run the local stages in reverse.
    CHECK(table(ScheduleKind::INTERLEAVED_1F1B, 2, 2, 4, kUnitCosts) ==
          R"(Interleaved1F1B, pp 2, v 2, m 4; costs F 1, B 1, I 1, W 1
 t  rank 0   rank 1
 0  F s0 m0  .
 1  F s0 m1  F s1 m0
 2  F s2 m0  F s1 m1
 3  F s2 m1  F s3 m0
 4  F s0 m2  B s3 m0
 5  B s2 m0  F s3 m1
 6  F s0 m3  B s3 m1
 7  B s2 m1  F s1 m2
 8  F s2 m2  B s1 m0
 9  B s0 m0  F s1 m3
10  F s2 m3  B s1 m1
11  B s0 m1  F s3 m2
12  .        B s3 m2
13  B s2 m2  F s3 m3
14  .        B s3 m3
15  B s2 m3  B s1 m2
16  B s0 m2  B s1 m3
17  B s0 m3  .
makespan 18, bubble 0.111 (idle / (ranks x makespan))
bubble per rank: r0 0.111, r1 0.111
peak held microbatches per rank: r0 5, r1 3
)");
  }

  TEST_CASE("pipeline schedule: ZBVZeroBubble on pp 2 with 4 microbatches") {
    // Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2: the turn from stage 1 to 2 stays on
    // rank 1. With F = I = W the only idle units are rank 1's first and rank 0's last.
    CHECK(table(ScheduleKind::ZBV_ZERO_BUBBLE, 2, 2, 4, kUnitCosts) ==
          R"(ZBVZeroBubble, pp 2, v 2, m 4; costs F 1, B 1, I 1, W 1
 t  rank 0   rank 1
 0  F s0 m0  .
 1  F s0 m1  F s1 m0
 2  F s0 m2  F s2 m0
 3  F s3 m0  F s1 m1
 4  I s3 m0  F s2 m1
 5  W s3 m0  I s2 m0
 6  F s3 m1  W s2 m0
 7  I s3 m1  F s1 m2
 8  W s3 m1  I s1 m0
 9  F s0 m3  W s1 m0
10  I s0 m0  F s2 m2
11  W s0 m0  I s2 m1
12  F s3 m2  W s2 m1
13  I s3 m2  F s1 m3
14  W s3 m2  I s1 m1
15  I s0 m1  W s1 m1
16  W s0 m1  F s2 m3
17  F s3 m3  I s2 m2
18  I s3 m3  W s2 m2
19  W s3 m3  I s1 m2
20  I s0 m2  I s2 m3
21  W s0 m2  I s1 m3
22  I s0 m3  W s1 m2
23  W s0 m3  W s2 m3
24  .        W s1 m3
makespan 25, bubble 0.040 (idle / (ranks x makespan))
bubble per rank: r0 0.040, r1 0.040
peak held microbatches per rank: r0 4, r1 4
)");
  }

  TEST_CASE("pipeline schedule: the simulator proves every schedule on pp 2 4 and 8") {
    // Refused exactly by the stated rules; every list generated is deadlock-free, matched,
    // ordered and complete (simulate checks all of that).
    for (ScheduleKind kind : kAllKinds) {
      const bool interleaved =
          kind == ScheduleKind::INTERLEAVED_1F1B || kind == ScheduleKind::INTERLEAVED_ZERO_BUBBLE;
      std::vector<int64_t> stages_per_rank = {1};
      if (interleaved) stages_per_rank = {1, 2, 3, 4};
      if (kind == ScheduleKind::ZBV_ZERO_BUBBLE) stages_per_rank = {2};
      for (int64_t pp : {2, 4, 8}) {
        for (int64_t v : stages_per_rank) {
          for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16, 24, 32, 33}) {
            CAPTURE(kScheduleKindNames.name(kind));
            CAPTURE(pp);
            CAPTURE(v);
            CAPTURE(m);
            const bool refused = interleaved && m % std::max<int64_t>(1, m / pp) != 0;
            ValueOrRefusal<PipelineSchedule> schedule = generate_schedule(kind, pp, v, m);
            CHECK(schedule.ok() != refused);
            if (!schedule.ok()) continue;
            for (const SimulationCosts& costs :
                 {SimulationCosts{}, kUnitCosts, SimulationCosts{2, 3, 1, 2}}) {
              ValueOrRefusal<Simulation> simulation = simulate(schedule.value(), costs);
              CHECK_MESSAGE(simulation.ok(), simulation.error());
            }
          }
        }
      }
    }
  }

  TEST_CASE(
      "pipeline schedule: messages keep their order per kind and per pair without the split "
      "backward") {
    // The executor sends activations and gradients on two channels, each matched in post order
    // (simulate() refuses a list whose receives of one kind cross their sends). On one channel
    // (NCCL's), the zero-bubble lists would cross: ZBV on pp 2 sends SEND_ACT s0 m2 to rank 1
    // before SEND_GRAD s3 m0, which rank 1 takes first.
    for (ScheduleKind kind : kAllKinds) {
      const bool split = splits_backward(kind);
      const int64_t v = is_single_stage(kind) ? 1 : 2;
      for (int64_t pp : {2, 4, 8}) {
        for (int64_t m : {pp, 2 * pp, 4 * pp}) {
          CAPTURE(kScheduleKindNames.name(kind));
          CAPTURE(pp);
          CAPTURE(m);
          const PipelineSchedule schedule = make(kind, pp, v, m);
          CHECK(message_order_fault(schedule, MessageChannels::PER_KIND).empty());
          if (!split) CHECK(message_order_fault(schedule, MessageChannels::ONE).empty());
        }
      }
    }
    CHECK(message_order_fault(make(ScheduleKind::ZBV_ZERO_BUBBLE, 2, 2, 4), MessageChannels::ONE) ==
          "rank 0 to rank 1: message 2 sent is SEND_ACT s0 m2 to r1 but rank 1's receive 2 takes "
          "SEND_GRAD s3 m0 to r1");
    // A list that runs with every message buffered but takes two activations in the other
    // order than they were sent is refused: rank 1 of GPipe receives m1 before m0.
    PipelineSchedule crossed = make(ScheduleKind::GPIPE, 2, 1, 2);
    std::vector<Action>& receiver = crossed.ranks[1];
    const auto is_second = [](const Action& a) {
      return a.kind == ActionKind::RECV_ACT && a.microbatch == 1;
    };
    const Action second = *std::find_if(receiver.begin(), receiver.end(), is_second);
    receiver.erase(std::find_if(receiver.begin(), receiver.end(), is_second));
    receiver.insert(receiver.begin(), second);
    CHECK(contains(refusal(crossed),
                   "rank 0 to rank 1 (activations): message 0 sent is SEND_ACT s0 m0"));
  }

  TEST_CASE("pipeline schedule: forward-only lists run every stage of every microbatch in order") {
    for (ScheduleKind kind : kAllKinds) {
      const int64_t v = is_single_stage(kind) ? 1 : 2;
      for (int64_t pp : {2, 4}) {
        const StagePlacement placement(placement_style(kind), pp, v);
        const std::vector<std::vector<Action>> lists = forward_only_actions(placement, 3);
        for (int64_t r = 0; r < pp; ++r) {
          std::vector<std::pair<int64_t, int64_t>> forwards;  // (microbatch, stage)
          for (const Action& a : lists[static_cast<size_t>(r)]) {
            CHECK(a.kind != ActionKind::BACKWARD_FULL);
            if (a.kind == ActionKind::FORWARD) forwards.emplace_back(a.microbatch, a.stage);
          }
          CHECK(forwards.size() == static_cast<size_t>(3 * v));
          CHECK(std::is_sorted(forwards.begin(), forwards.end()));
        }
        // The lists evaluate() runs: their messages keep their order even on one channel.
        PipelineSchedule schedule{kind, 3, placement, lists};
        CHECK(message_order_fault(schedule, MessageChannels::ONE).empty());
      }
    }
  }

  TEST_CASE("pipeline schedule: the generator refuses what no schedule can run") {
    auto refused = [](ScheduleKind kind, int64_t pp, int64_t v, int64_t m) {
      ValueOrRefusal<PipelineSchedule> schedule = generate_schedule(kind, pp, v, m);
      REQUIRE_FALSE(schedule.ok());
      CHECK(schedule.error().find('\n') == std::string::npos);
      return schedule.error();
    };
    CHECK(refused(ScheduleKind::GPIPE, 4, 2, 8) ==
          "GPipe runs 1 stage per rank, got 2; use 1, or Interleaved1F1B or "
          "InterleavedZeroBubble for more");
    CHECK(
        contains(refused(ScheduleKind::ONE_F_ONE_B, 4, 3, 8), "1F1B runs 1 stage per rank, got 3"));
    CHECK(refused(ScheduleKind::ZBV_ZERO_BUBBLE, 4, 3, 8) ==
          "ZBVZeroBubble runs exactly 2 stages per rank (a V), got 3; use 2, or "
          "InterleavedZeroBubble for other counts");
    CHECK(contains(refused(ScheduleKind::ZBV_ZERO_BUBBLE, 4, 1, 8), "got 1"));
    CHECK(contains(refused(ScheduleKind::INTERLEAVED_1F1B, 4, 2, 9),
                   "Interleaved1F1B runs the microbatches in 2 rounds"));
    CHECK(refused(ScheduleKind::INTERLEAVED_ZERO_BUBBLE, 4, 2, 11) ==
          "InterleavedZeroBubble runs the microbatches in 2 rounds (microbatches / pp), and 11 "
          "microbatches do not divide into them; use a multiple of 2 such as 10 or 12");
    // Fewer microbatches than pp are valid, as in torch: one round, a larger bubble.
    CHECK(generate_schedule(ScheduleKind::INTERLEAVED_1F1B, 4, 2, 3).ok());
    CHECK(generate_schedule(ScheduleKind::ZBV_ZERO_BUBBLE, 8, 2, 7).ok());
    CHECK(contains(refused(ScheduleKind::ONE_F_ONE_B, 4, 1, 0), "each must be at least 1"));
    CHECK(contains(refused(ScheduleKind::ONE_F_ONE_B, 0, 1, 4), "pp 0"));
  }

  TEST_CASE("pipeline simulator: bubble of GPipe and 1F1B is (p - 1) / (m + p - 1)") {
    // With every rank's forward costing f and backward b, both schedules take (m + p − 1)(f + b)
    // of which each rank computes m(f + b): the closed form holds for F = B and for B = 2F.
    for (const SimulationCosts& costs : {kUnitCosts, SimulationCosts{}}) {
      for (ScheduleKind kind : {ScheduleKind::GPIPE, ScheduleKind::ONE_F_ONE_B}) {
        for (int64_t pp : {2, 4, 8}) {
          for (int64_t m : {1, 2, 3, 4, 8, 16, 32}) {
            CAPTURE(kScheduleKindNames.name(kind));
            CAPTURE(pp);
            CAPTURE(m);
            CAPTURE(costs.backward_full);
            const Simulation simulation = run(make(kind, pp, 1, m), costs);
            const double closed = static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1);
            CHECK(simulation.bubble == doctest::Approx(closed).epsilon(1e-12));
            CHECK(simulation.makespan == (m + pp - 1) * (costs.forward + costs.backward_full));
          }
        }
      }
    }
  }

  TEST_CASE("pipeline simulator: a run timed per rank gives the simulator's bubble back") {
    // Each rank's pipeline timer runs from the list's start to its own last compute: a rank that
    // finishes early idles the rest of the makespan where that timer does not see it.
    // measured_bubble() takes the slowest rank's time as the makespan, so timings taken that way
    // give the simulator's bubble exactly; the mean of the ranks' own shares gives less.
    for (ScheduleKind kind :
         {ScheduleKind::GPIPE, ScheduleKind::INTERLEAVED_1F1B, ScheduleKind::ZBV_ZERO_BUBBLE}) {
      CAPTURE(kScheduleKindNames.name(kind));
      const Simulation simulation =
          run(make(kind, 2, kind == ScheduleKind::GPIPE ? 1 : 2, 4), SimulationCosts{});
      std::vector<double> seconds, waits;
      double own_shares = 0;
      for (size_t r = 0; r < simulation.ranks.size(); ++r) {
        const double span = static_cast<double>(simulation.timeline[r].back().end);
        seconds.push_back(span);
        waits.push_back(span - static_cast<double>(simulation.ranks[r].busy));
        own_shares += waits.back() / span / static_cast<double>(simulation.ranks.size());
      }
      CHECK(measured_bubble(seconds, waits) == doctest::Approx(simulation.bubble).epsilon(1e-12));
      CHECK(own_shares < simulation.bubble - 0.01);
    }
    CHECK(measured_bubble({}, {}) == 0);
    CHECK(measured_bubble({2.0, 1.0}, {0.5, 0.25}) == doctest::Approx(1 - 2.25 / 4));
  }

  TEST_CASE("pipeline simulator: 1F1B holds at most pp microbatches and GPipe holds all m") {
    for (int64_t pp : {2, 4, 8}) {
      for (int64_t m : {1, 2, 4, 8, 16, 32}) {
        const Simulation one_f_one_b = run(make(ScheduleKind::ONE_F_ONE_B, pp, 1, m));
        const Simulation gpipe = run(make(ScheduleKind::GPIPE, pp, 1, m));
        for (int64_t r = 0; r < pp; ++r) {
          // Rank r warms up with pp − r forwards: that many are held when its first backward runs.
          CHECK(one_f_one_b.ranks[static_cast<size_t>(r)].peak_held == std::min(m, pp - r));
          CHECK(gpipe.ranks[static_cast<size_t>(r)].peak_held == m);
        }
        CHECK(peak(one_f_one_b) <= pp);
      }
    }
  }

  TEST_CASE("pipeline simulator: refuses lists broken by hand and names the rank and action") {
    // 1F1B on pp 2 with 4 microbatches: rank 0 runs F s0 m0, SEND_ACT s0 m0 to r1, F s0 m1,
    // SEND_ACT s0 m1 to r1, RECV_GRAD s0 m0 from r1, B s0 m0, …; rank 1 runs RECV_ACT s1 m0
    // from r0, F s1 m0, B s1 m0, SEND_GRAD s1 m0 to r0, … (the action-list case above).
    const PipelineSchedule good = make(ScheduleKind::ONE_F_ONE_B, 2, 1, 4);
    REQUIRE(simulate(good).ok());

    SUBCASE("a send swapped before the forward that produces it") {
      PipelineSchedule broken = good;
      std::swap(broken.ranks[0][2], broken.ranks[0][3]);
      CHECK(refusal(broken) ==
            "pipeline schedule 1F1B (pp 2, v 1, m 4): rank 0 action 2 (SEND_ACT s0 m1 to r1): "
            "sends the output of F s0 m1 before computing it; move it after that forward");
    }
    SUBCASE("two sends swapped: the first microbatch's goes second") {
      PipelineSchedule broken = good;
      std::swap(broken.ranks[0][1], broken.ranks[0][3]);
      CHECK(contains(refusal(broken),
                     "rank 0 action 1 (SEND_ACT s0 m1 to r1): sends the output of "
                     "F s0 m1 before computing it"));
    }
    SUBCASE("a send to the wrong peer") {
      PipelineSchedule broken = make(ScheduleKind::ONE_F_ONE_B, 4, 1, 4);
      broken.ranks[0][1].peer = 2;
      CHECK(contains(refusal(broken),
                     "rank 0 action 1 (SEND_ACT s0 m0 to r2): stage 1 is on rank 1, "
                     "not rank 2; use peer 1"));
    }
    SUBCASE("a missing receive") {
      PipelineSchedule broken = good;
      broken.ranks[1].erase(broken.ranks[1].begin());
      CHECK(contains(refusal(broken),
                     "rank 0 action 1 (SEND_ACT s0 m0 to r1): rank 1 never "
                     "receives it"));
    }
    SUBCASE("a missing send") {
      PipelineSchedule broken = good;
      broken.ranks[0].erase(broken.ranks[0].begin() + 1);
      CHECK(contains(refusal(broken),
                     "rank 1 action 0 (RECV_ACT s1 m0 from r0): rank 0 never sends "
                     "SEND_ACT s0 m0 to r1"));
    }
    SUBCASE("a compute whose receive was dropped with its send") {
      PipelineSchedule broken = good;
      broken.ranks[0].erase(broken.ranks[0].begin() + 1);
      broken.ranks[1].erase(broken.ranks[1].begin());
      CHECK(contains(refusal(broken),
                     "rank 1 action 0 (F s1 m0): its input from stage 0 has not "
                     "arrived; put RECV_ACT s1 m0 from r0 before it"));
    }
    SUBCASE("a backward before its forward") {
      PipelineSchedule broken = good;
      std::swap(broken.ranks[1][1], broken.ranks[1][2]);
      CHECK(
          contains(refusal(broken), "rank 1 action 1 (B s1 m0): runs before its forward F s1 m0"));
    }
    SUBCASE("a receive too early: both ranks wait") {
      PipelineSchedule broken = good;
      const Action early = broken.ranks[0][4];  // RECV_GRAD s0 m0 from r1
      broken.ranks[0].erase(broken.ranks[0].begin() + 4);
      broken.ranks[0].insert(broken.ranks[0].begin(), early);
      CHECK(refusal(broken) ==
            "pipeline schedule 1F1B (pp 2, v 1, m 4): deadlock: rank 0 action 0 (RECV_GRAD s0 m0 "
            "from r1) waits for rank 1's SEND_GRAD s1 m0 to r0; rank 1 action 0 (RECV_ACT s1 m0 "
            "from r0) waits for rank 0's SEND_ACT s0 m0 to r1");
    }
    SUBCASE("a forward run twice") {
      PipelineSchedule broken = good;
      broken.ranks[0].insert(broken.ranks[0].begin() + 1, broken.ranks[0][0]);
      CHECK(contains(refusal(broken), "rank 0 action 1 (F s0 m0): runs twice"));
    }
    SUBCASE("a compute on the rank that does not hold its stage") {
      PipelineSchedule broken = good;
      broken.ranks[0].push_back(Action{ActionKind::FORWARD, 1, 0, -1});
      CHECK(contains(refusal(broken), "rank 0 action 16 (F s1 m0): stage 1 is on rank 1"));
    }
    SUBCASE("a weight gradient never computed") {
      PipelineSchedule broken = make(ScheduleKind::ZBV_ZERO_BUBBLE, 2, 2, 4);
      std::vector<Action>& rank0 = broken.ranks[0];
      const auto last_w =
          std::find(rank0.rbegin(), rank0.rend(), Action{ActionKind::BACKWARD_WEIGHT, 0, 3, -1});
      REQUIRE(last_w != rank0.rend());
      rank0.erase(std::next(last_w).base());
      CHECK(contains(refusal(broken),
                     "rank 0: stage 0 microbatch 3 has no W: its weight gradient is "
                     "incomplete"));
    }
    SUBCASE("a microbatch never backwarded") {
      PipelineSchedule broken = good;
      broken.ranks[0].pop_back();  // B s0 m3
      broken.ranks[0].pop_back();  // RECV_GRAD s0 m3 from r1
      broken.ranks[1].pop_back();  // SEND_GRAD s1 m3 to r0
      CHECK(contains(refusal(broken), "rank 0: stage 0 microbatch 3 is never backwarded"));
    }
  }

  TEST_CASE("pipeline simulator: the figures of docs/pipeline.md") {
    // The same model on every schedule: a rank's share of the layers costs F 2, B 4 (I 2 + W 2)
    // per microbatch, so a stage of an interleaved or V schedule (half a share, v = 2) costs
    // F 1, B 2, I 1, W 1. Peak held is in (stage, microbatch) units and in shares (÷ v).
    // TITAN_PIPELINE_TABLE=1 prints the table and the 1F1B picture of docs/pipeline.md.
    const bool print = std::getenv("TITAN_PIPELINE_TABLE") != nullptr;
    std::ostringstream out;
    out << "| schedule | pp | v | m | makespan | bubble | peak held (stage-microbatches) | "
           "peak held (shares) |\n|---|---|---|---|---|---|---|---|\n";
    for (int64_t pp : {4, 8}) {
      for (ScheduleKind kind : kAllKinds) {
        const int64_t v = is_single_stage(kind) ? 1 : 2;
        const SimulationCosts costs = v == 1 ? SimulationCosts{2, 4, 2, 2} : SimulationCosts{};
        for (int64_t m : {8, 16, 32}) {
          const Simulation simulation = run(make(kind, pp, v, m), costs);
          char bubble[16];
          std::snprintf(bubble, sizeof bubble, "%.3f", simulation.bubble);
          char shares[16];
          std::snprintf(shares, sizeof shares, "%.1f", static_cast<double>(peak(simulation)) / v);
          out << "| " << kScheduleKindNames.name(kind) << " | " << pp << " | " << v << " | " << m
              << " | " << simulation.makespan << " | " << bubble << " | " << peak(simulation)
              << " | " << shares << " |\n";
          // No schedule idles more than GPipe does.
          CHECK(simulation.bubble <=
                static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1) + 1e-12);
        }
      }
    }
    const PipelineSchedule picture = make(ScheduleKind::ONE_F_ONE_B, 4, 1, 8);
    const std::string picture_text = schedule_table(picture, run(picture, kUnitCosts));
    CHECK(contains(picture_text, "makespan 22, bubble 0.273"));
    if (print) std::cout << out.str() << "\n" << picture_text;
  }

  TEST_CASE("pipeline simulator: Interleaved1F1B idles v times less than 1F1B on the same model") {
    // The same layers on each rank: a 1F1B stage costs F = B = v, each of the v interleaved
    // stages F = B = 1. Interleaving divides every rank's idle time by v exactly, and the
    // bubble is (p − 1) / (v·m + p − 1), for every m ≥ pp the rounds allow.
    for (int64_t pp : {2, 4, 8}) {
      for (int64_t v : {2, 3, 4}) {
        for (int64_t m = 1; m <= 4 * pp + 2; ++m) {
          ValueOrRefusal<PipelineSchedule> interleaved =
              generate_schedule(ScheduleKind::INTERLEAVED_1F1B, pp, v, m);
          if (!interleaved.ok()) continue;
          CAPTURE(pp);
          CAPTURE(v);
          CAPTURE(m);
          const Simulation looped = run(interleaved.value(), kUnitCosts);
          const Simulation plain =
              run(make(ScheduleKind::ONE_F_ONE_B, pp, 1, m), SimulationCosts{v, v, v, v});
          if (m < pp) {
            // One short round: the pipeline never fills, and interleaving still never loses.
            CHECK(looped.makespan <= plain.makespan);
            continue;
          }
          CHECK(v * idle(looped) == idle(plain));
          CHECK(looped.bubble ==
                doctest::Approx(static_cast<double>(pp - 1) / static_cast<double>(v * m + pp - 1))
                    .epsilon(1e-12));
        }
      }
    }
  }

  TEST_CASE(
      "pipeline simulator: the zero-bubble schedules idle one forward per hop from m = 2p on") {
    // Costs F = I = W = 1 (B = 2): the zero-bubble papers' model. For every m from 2p to 4p + 2
    // that the rounds allow, each rank idles exactly p − 1 units in all, the fill and drain of
    // one forward per hop, whatever m is: ZBVZeroBubble and InterleavedZeroBubble with v = 2 take
    // 6m + p − 1 (1F1B on the same model, F 2 and B 4 per rank, takes 6(m + p − 1)), and
    // InterleavedZeroBubble with v = 1 (ZB-H1) takes 3m + p − 1 (1F1B: 3(m + p − 1)). The
    // largest bubble in this range is 7 / 103 = 0.068, ZB-V on pp 8 with m 16.
    for (int64_t pp : {2, 4, 8}) {
      for (int64_t m = 2 * pp; m <= 4 * pp + 2; ++m) {
        CAPTURE(pp);
        CAPTURE(m);
        const Simulation zbv = run(make(ScheduleKind::ZBV_ZERO_BUBBLE, pp, 2, m));
        CHECK(zbv.makespan == 6 * m + pp - 1);
        for (const RankFigures& rank : zbv.ranks) CHECK(rank.idle == pp - 1);
        CHECK(zbv.bubble <= 7.0 / 103.0 + 1e-12);
        const Simulation plain =
            run(make(ScheduleKind::ONE_F_ONE_B, pp, 1, m), SimulationCosts{2, 4, 2, 2});
        CHECK(plain.makespan == 6 * (m + pp - 1));
        if (m % std::max<int64_t>(1, m / pp) != 0) continue;
        const Simulation zb2 = run(make(ScheduleKind::INTERLEAVED_ZERO_BUBBLE, pp, 2, m));
        CHECK(zb2.makespan == 6 * m + pp - 1);
        CHECK(zb2.bubble <= 7.0 / 103.0 + 1e-12);
        const Simulation zb1 = run(make(ScheduleKind::INTERLEAVED_ZERO_BUBBLE, pp, 1, m));
        CHECK(zb1.makespan == 3 * m + pp - 1);
      }
    }
  }
}
