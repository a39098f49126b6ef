// The flight recorder of communication (parallel/comm/collective_recorder.h): numbering per
// communicator, what counts as blocked and overdue, the bounded history, and how another rank's
// question finds "the same communicator". No MPI: the recorder is plain bookkeeping.
#include <doctest/doctest.h>

#include <thread>

#include "parallel/comm/collective_recorder.h"

using titan::parallel::CollectiveRecorder;
using titan::parallel::CommGroup;
using titan::parallel::OpRecord;
using titan::parallel::RecorderClock;

TEST_SUITE("fast") {
  TEST_CASE("recorder: collectives are numbered per communicator and wait for the whole group") {
    CollectiveRecorder recorder;
    const int tp = recorder.add_comm({"tp", {4, 5}});
    const int dp = recorder.add_comm({"dp_shard", {1, 5, 9}});
    recorder.post_collective(tp, "all_gather of 8 f32 per rank", 32, 600);
    recorder.post_collective(dp, "all_reduce(Sum) of 1 f64", 8, 600);
    recorder.post_point_to_point(tp, "send of 4 bf16 to world rank 4", 8, 4, 600);
    recorder.post_collective(tp, "reduce_scatter(Sum) of 4 f32 per rank", 32, 600);
    const std::vector<OpRecord> recent = recorder.recent(10);
    REQUIRE(recent.size() == 4);
    CHECK(recent[0].seq == 1);
    CHECK(recent[0].comm_name == "tp");
    CHECK(recent[0].waits_for == std::vector<int>{4, 5});
    CHECK(recent[1].seq == 1);  // the first on dp_shard
    CHECK(recent[1].waits_for == std::vector<int>{1, 5, 9});
    CHECK(recent[2].seq == 0);  // point to point: not numbered
    CHECK(recent[2].waits_for == std::vector<int>{4});
    CHECK(recent[3].seq == 2);
    CHECK(recent[3].describe() == "#2 on tp: reduce_scatter(Sum) of 4 f32 per rank (32 B)");
    CHECK(recent[2].describe() == "send of 4 bf16 to world rank 4 on tp (8 B)");
    for (uint64_t id = 1; id < 5; ++id) CHECK(recent[id - 1].id == id);
  }

  TEST_CASE("recorder: only an operation this rank waits for can be overdue") {
    CollectiveRecorder recorder;
    const int world = recorder.add_comm({"world", {0, 1}});
    // A prefetch posted long ago and not yet waited for is not a hang: MPI may have finished it.
    const uint64_t prefetch = recorder.post_collective(world, "all_gather of 1 f32 per rank", 4, 0.01);
    const uint64_t waited = recorder.post_collective(world, "barrier", 0, 0.01);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    CHECK_FALSE(recorder.first_overdue(RecorderClock::now()).has_value());
    CHECK_FALSE(recorder.blocked_on().has_value());

    recorder.begin_wait(waited);
    CHECK(recorder.blocked_on()->id == waited);
    // The clock of a wait starts at the wait, not at the post.
    CHECK_FALSE(recorder.first_overdue(RecorderClock::now()).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const std::optional<OpRecord> overdue = recorder.first_overdue(RecorderClock::now());
    REQUIRE(overdue.has_value());
    CHECK(overdue->id == waited);
    CHECK(overdue->blocked_s(RecorderClock::now()) > 0.01);

    recorder.complete(waited);
    recorder.complete(prefetch);
    CHECK_FALSE(recorder.first_overdue(RecorderClock::now()).has_value());
    CHECK(recorder.recent(2)[1].done);
  }

  TEST_CASE("recorder: the history is bounded but operations in flight are never forgotten") {
    CollectiveRecorder recorder;
    const int world = recorder.add_comm({"world", {0, 1}});
    const uint64_t first = recorder.post_collective(world, "barrier", 0, 0);
    recorder.begin_wait(first);
    for (size_t i = 0; i < 2 * CollectiveRecorder::kHistory; ++i) {
      recorder.complete(recorder.post_collective(world, "all_reduce(Max) of 1 f64", 8, 600));
    }
    CHECK(recorder.recent(10 * CollectiveRecorder::kHistory).size() == CollectiveRecorder::kHistory);
    // Out of the history, still in flight: still watched.
    const std::optional<OpRecord> overdue = recorder.first_overdue(RecorderClock::now());
    REQUIRE(overdue.has_value());
    CHECK(overdue->id == first);
    recorder.complete(first);  // out of the history: only leaves the in-flight set
    CHECK_FALSE(recorder.blocked_on().has_value());
  }

  TEST_CASE("recorder: another rank's question finds the same group by name and members") {
    CollectiveRecorder recorder;
    const int old_tp = recorder.add_comm({"tp", {0, 1}});
    recorder.post_collective(old_tp, "all_gather of 2 f32 per rank", 8, 600);
    const int tp = recorder.add_comm({"tp", {0, 1}});  // made again: the newest counts
    recorder.add_comm({"tp", {2, 3}});                 // another group of the same dims
    recorder.post_collective(tp, "all_reduce(Sum) of 1 f64", 8, 600);
    recorder.post_collective(tp, "barrier", 0, 600);

    CollectiveRecorder::GroupProgress progress = recorder.progress({"tp", {0, 1}}, 2);
    CHECK(progress.known);
    CHECK(progress.posted == 2);
    CHECK(progress.op_at_seq == "barrier");
    CHECK_FALSE(recorder.progress({"tp", {0, 1}}, 3).op_at_seq.has_value());
    CHECK_FALSE(recorder.progress({"tp", {0, 2}}, 1).known);
    CHECK_FALSE(recorder.progress({"dp_shard", {0, 1}}, 1).known);
    CHECK(recorder.progress({"tp", {2, 3}}, 1).posted == 0);
  }
}
