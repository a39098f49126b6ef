// What the MPI watchdog (mpi_watchdog.h) asks the other ranks when an operation times out, what
// they answer, and the report it prints from the answers. Pure functions over the recorder's
// records and text: no MPI, no clock, so every verdict and every line is unit-tested.
//
// The question names a communicator by its group (name and members) and a collective number,
// and goes to every rank: the answer says how far the answering rank has got on that group,
// what it is blocked on, what it did last and its last operations. The ranks of the group are
// judged against the collective; the rest of the world's answers name the likely cause when it
// lies further away (a rank of another group that stopped, so that the ranks of this one wait
// for ranks that wait for it). Both travel as text lines of tab-separated fields: a few hundred
// bytes per rank once per failing job, readable in a debugger.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/collective_recorder.h"

namespace titan::parallel {

// One operation as another rank reports it: its description and age in seconds.
struct ReportedOp {
  std::string what;  // OpRecord::describe()
  double age_s = 0;
};

struct PeerAnswer {
  bool knows_group = false;              // it has a communicator with that name and members
  int64_t posted = 0;                    // collectives it has posted there
  std::optional<std::string> op_at_seq;  // its collective #seq there (the op), when it has one
  std::optional<ReportedOp> blocked;     // the operation it is blocked on; age_s: for how long
  std::optional<double> timeout_in_s;    // blocked: seconds left to that operation's timeout when
                                         // it answered (negative: overdue, its watchdog fires too)
  std::optional<ReportedOp> last;        // the last operation it posted; age_s: since the post
  std::vector<std::string> recent;       // its last operations, oldest first, one line each
};

struct WatchdogQuestion {
  CommGroup group;
  int64_t seq = 0;  // 0: a point-to-point operation (no number to compare)
};

std::string encode_question(const WatchdogQuestion& question);
std::optional<WatchdogQuestion> decode_question(const std::string& text);  // nullopt: garbled
std::string encode_answer(const PeerAnswer& answer);
PeerAnswer decode_answer(const std::string& text);

// This rank's answer, from its recorder, `now` on its clock.
PeerAnswer answer_question(const CollectiveRecorder& recorder, const WatchdogQuestion& question,
                           RecorderClock::time_point now, size_t recent_count);

// Whether the rank that gave `answer` `since_answer_s` seconds ago has timed out by now: it was
// overdue when it answered, or the operation it was blocked on then has reached its timeout
// since. A rank blocked on a collective that waits for a stopped rank stays blocked, so this is
// what decides which of the ranks that time out together reports, even when the lower one was
// still a moment short of its timeout when it answered.
bool timed_out_by_now(const PeerAnswer& answer, double since_answer_s);

// One line per operation for the dump: "#41 on dp_shard: all_reduce(Sum) of 2 f32 (8 B), in
// flight for 10.2 s" or "…, done in 0.003 s, 1.4 s ago".
std::string describe_for_dump(const OpRecord& record, RecorderClock::time_point now);

enum class PeerState {
  NoAnswer,             // its watchdog did not answer: the process is stopped or frozen
  NotArrived,           // it has not posted this collective yet
  DifferentCollective,  // its collective of this number is another operation
  Arrived,              // it posted the same one
  Answered,             // point to point: it answered (what it is doing is in the detail)
};

struct PeerVerdict {
  int world_rank = -1;
  PeerState state = PeerState::NoAnswer;
  std::string detail;  // "no answer: stopped or frozen", "at #47 on dp_shard; blocked on …"
};

// The answers of every other rank, by world rank (nullopt: it did not answer).
using WorldAnswers = std::map<int, std::optional<PeerAnswer>>;

// Sorts the ranks `overdue` waits for (its group's other ranks, or its peer), from their
// answers.
std::vector<PeerVerdict> judge(const OpRecord& overdue, const WorldAnswers& answers);

// The report of rank `world_rank`, blocked `blocked_s` on `overdue`: the first line is the
// error (the caller prefixes "titan_train: rank R: error: "), ending "; aborting the job"; the
// rest dump the last operations of this rank and of the ranks of its group that answered.
std::vector<std::string> watchdog_report(int world_rank, const OpRecord& overdue, double blocked_s,
                                         const std::vector<PeerVerdict>& verdicts,
                                         const WorldAnswers& answers,
                                         const std::vector<std::string>& own_recent);

}  // namespace titan::parallel
