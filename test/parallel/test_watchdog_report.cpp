// What the MPI watchdog says (parallel/comm/watchdog_report.h): the questions and answers its
// threads exchange survive the round trip, each rank of a group gets the right verdict, and the
// report's first line names the collective, its mesh dims, the ranks that had not arrived and
// the likely cause. No MPI: the e2e tests (test/app/test_watchdog.cpp) run the real thing.
#include <doctest/doctest.h>

#include "parallel/comm/watchdog_report.h"
#include "support/text.h"

using namespace titan::parallel;

namespace {

using titan::testing::contains;

OpRecord collective(int64_t seq, std::string op, std::vector<int> group, std::string comm) {
  OpRecord r;
  r.seq = seq;
  r.op = std::move(op);
  r.comm_name = std::move(comm);
  r.waits_for = std::move(group);
  r.bytes = 8;
  r.timeout_s = 10;
  return r;
}

PeerAnswer at(int64_t posted, std::optional<std::string> op_at_seq = std::nullopt) {
  PeerAnswer a;
  a.knows_group = true;
  a.posted = posted;
  a.op_at_seq = std::move(op_at_seq);
  a.last = ReportedOp{"#7 on world: all_reduce(Max) of 1 f64 (8 B)", 3.5};
  return a;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("watchdog report: questions and answers survive the round trip") {
    const WatchdogQuestion q{{"dp_replicate×dp_shard", {0, 2, 4, 6}}, 41};
    const std::optional<WatchdogQuestion> back = decode_question(encode_question(q));
    REQUIRE(back.has_value());
    CHECK(back->group.name == q.group.name);
    CHECK(back->group.world_ranks == q.group.world_ranks);
    CHECK(back->seq == 41);
    CHECK_FALSE(decode_question("nonsense").has_value());
    CHECK_FALSE(decode_question("question\ttp\tx\t0,1").has_value());
    CHECK_FALSE(decode_question("question\ttp\t3\t0,one").has_value());

    PeerAnswer a = at(40, "all_reduce(Sum) of 2 f32");
    a.blocked = ReportedOp{"#12 on tp: barrier (0 B)", 9.25};
    a.timeout_in_s = -0.25;
    a.recent = {"#11 on tp: barrier (0 B), done in 0.001 s, 9.3 s ago", "tab\tand\nnewline"};
    const PeerAnswer b = decode_answer(encode_answer(a));
    CHECK(b.knows_group);
    CHECK(b.posted == 40);
    CHECK(b.op_at_seq == "all_reduce(Sum) of 2 f32");
    REQUIRE(b.blocked.has_value());
    CHECK(b.blocked->what == "#12 on tp: barrier (0 B)");
    CHECK(b.blocked->age_s == doctest::Approx(9.25));
    REQUIRE(b.timeout_in_s.has_value());
    CHECK(*b.timeout_in_s == doctest::Approx(-0.25));
    CHECK_FALSE(decode_answer(encode_answer(at(3))).timeout_in_s.has_value());
    REQUIRE(b.last.has_value());
    CHECK(b.last->age_s == doctest::Approx(3.5));
    REQUIRE(b.recent.size() == 2);
    CHECK(b.recent[1] == "tab and newline");  // separators inside a field become spaces
    // Garbage decodes to an answer that knows nothing, never to a crash.
    CHECK_FALSE(decode_answer("group\tx\n\tblocked\n").knows_group);
  }

  TEST_CASE("watchdog report: a rank counts as timed out when its timeout passed by now") {
    PeerAnswer overdue = at(3);
    overdue.timeout_in_s = -0.5;  // overdue when it answered
    CHECK(timed_out_by_now(overdue, 0));
    // 0.1 s short of its timeout when it answered (the race two reports came from): not yet,
    // but by the end of a 2 s answer window it has fired too.
    PeerAnswer almost = at(3);
    almost.timeout_in_s = 0.1;
    CHECK_FALSE(timed_out_by_now(almost, 0.05));
    CHECK(timed_out_by_now(almost, 2.0));
    // Not blocked: nothing to time out, however long ago it answered.
    CHECK_FALSE(timed_out_by_now(at(3), 100));
  }

  TEST_CASE("watchdog report: each rank of the group is judged against the collective") {
    const OpRecord overdue =
        collective(41, "all_reduce(Sum) of 2 f32", {0, 1, 2, 3, 4}, "dp_shard");
    PeerAnswer waiting_elsewhere = at(40);
    waiting_elsewhere.blocked = ReportedOp{"#9 on tp: all_gather of 4 f32 per rank (16 B)", 11};
    PeerAnswer no_group;
    no_group.last = ReportedOp{"#3 on MPI_COMM_WORLD: agree_on_status (set-up) (4 B)", 12};
    const WorldAnswers answers{{1, std::nullopt},
                               {2, waiting_elsewhere},
                               {3, at(41, "broadcast of 4 i32 from 0")},
                               {4, at(45, "all_reduce(Sum) of 2 f32")},
                               {5, at(0)},  // not in the group: not judged
                               {6, no_group}};
    const std::vector<PeerVerdict> v = judge(overdue, answers);
    REQUIRE(v.size() == 4);  // ranks 1-4: this rank (0) is not its own peer, 5 and 6 not members
    CHECK(v[0].world_rank == 1);
    CHECK(v[0].state == PeerState::NoAnswer);
    CHECK(v[1].state == PeerState::NotArrived);
    CHECK(contains(v[1].detail, "at #40 on dp_shard"));
    CHECK(contains(v[1].detail, "blocked on #9 on tp: all_gather"));
    CHECK(v[2].state == PeerState::DifferentCollective);
    CHECK(contains(v[2].detail, "its #41 on dp_shard is broadcast of 4 i32 from 0"));
    CHECK(v[3].state == PeerState::Arrived);

    // A rank that has not made the communicator yet has not arrived.
    const OpRecord with_six = collective(1, "barrier", {0, 6}, "tp");
    const std::vector<PeerVerdict> v6 = judge(with_six, answers);
    REQUIRE(v6.size() == 1);
    CHECK(v6[0].state == PeerState::NotArrived);
    CHECK(contains(v6[0].detail, "has no tp communicator yet"));
    CHECK(contains(v6[0].detail, "busy outside communication"));
  }

  TEST_CASE(
      "watchdog report: the first line names the collective the ranks missing and the cause") {
    const OpRecord overdue =
        collective(47, "all_gather of 131072 f32 per rank", {0, 2}, "dp_shard");
    // Rank 2 of the group stopped.
    WorldAnswers answers{{1, at(3)}, {2, std::nullopt}, {3, at(3)}};
    std::vector<std::string> lines =
        watchdog_report(0, overdue, 10.04, judge(overdue, answers), answers, {"#46 …", "#47 …"});
    const std::string& first = lines[0];
    CHECK(
        first.starts_with("MPI watchdog: blocked 10.0 s (parallelism.comm_timeout_s 10) on "
                          "collective #47 on dp_shard, all_gather of 131072 f32 per rank (8 B)"));
    // Ranks 1 and 3 are not blocked, but the stopped rank 2 explains the hang: nothing more.
    CHECK(
        first.ends_with("not arrived: rank 2 (no answer: stopped (SIGSTOP, a debugger) or "
                        "frozen); aborting the job"));
    REQUIRE(lines.size() == 4);  // then this rank's dump: a heading and its two operations
    CHECK(lines[1] == "MPI watchdog: the last 2 operations of rank 0, oldest first:");
    CHECK(lines[3] == "  #47 …");

    // Every rank of the group arrived, but a rank of another group stopped: the cause is named.
    answers = {{1, std::nullopt}, {2, at(47, "all_gather of 131072 f32 per rank")}, {3, at(9)}};
    answers[2]->blocked = ReportedOp{"#12 on tp: barrier (0 B)", 10};
    answers[2]->recent = {"#12 on tp: barrier (0 B), in flight for 10.0 s"};
    lines = watchdog_report(0, overdue, 10, judge(overdue, answers), answers, {});
    CHECK(contains(lines[0],
                   "every rank of dp_shard posted it; no answer from rank 1 (stopped, or "
                   "frozen), for whom the others wait"));
    REQUIRE(lines.size() == 3);  // rank 2 answered: its dump
    CHECK(lines[1] == "MPI watchdog: the last 1 operations of rank 2, oldest first:");

    // The group's ranks wait elsewhere and nobody is silent: the ranks not blocked are the cause.
    answers = {{1, at(5)}, {2, at(40)}, {3, at(9)}};
    answers[2]->blocked = ReportedOp{"#12 on tp: barrier (0 B)", 10};
    answers[3]->blocked = ReportedOp{"#9 on world: barrier (0 B)", 10};
    lines = watchdog_report(0, overdue, 10, judge(overdue, answers), answers, {});
    CHECK(contains(lines[0], "not arrived: rank 2 (at #40 on dp_shard; blocked on #12 on tp"));
    CHECK(contains(lines[0],
                   "; not blocked, so the others wait for them: rank 1 (not blocked: busy "
                   "outside communication since its last operation"));
    CHECK_FALSE(contains(lines[0], "rank 3 ("));

    // Everybody answered and arrived, nobody is busy elsewhere: the transport is stuck.
    answers = {{2, at(47, "all_gather of 131072 f32 per rank")}};
    answers[2]->blocked = ReportedOp{"#47 …", 10};
    lines = watchdog_report(0, overdue, 10, judge(overdue, answers), answers, {});
    CHECK(contains(lines[0],
                   "every rank of dp_shard posted it, and every rank answered: "
                   "communication itself is stuck"));

    // Ranks that disagree on the order are named as such.
    answers = {{2, at(47, "barrier")}};
    lines = watchdog_report(0, overdue, 10, judge(overdue, answers), answers, {});
    CHECK(contains(lines[0],
                   "in a different collective (the ranks disagree on the order of "
                   "collectives): rank 2 (its #47 on dp_shard is barrier)"));
  }

  TEST_CASE("watchdog report: a point-to-point operation names its peer") {
    OpRecord recv;
    recv.op = "recv of 4096 bf16 from world rank 3";
    recv.comm_name = "tp";
    recv.waits_for = {3};
    recv.timeout_s = 5;
    const WorldAnswers answers{{1, at(2)}, {3, std::nullopt}};
    const std::vector<PeerVerdict> v = judge(recv, answers);
    REQUIRE(v.size() == 1);
    CHECK(v[0].state == PeerState::NoAnswer);
    const std::string first = watchdog_report(2, recv, 5.5, v, answers, {})[0];
    CHECK(contains(
        first, "on recv of 4096 bf16 from world rank 3 on tp (0 B); its peer: rank 3 (no answer"));
  }
}
