// The flight recorder of communication (what PyTorch's NCCL flight recorder is to
// torch.distributed): every operation this process posts on a communicator, in post order,
// with what the watchdogs need to tell a hang from a mismatch.
//
// Collectives are numbered per communicator: the n-th collective a rank posts on its
// "dp_shard" group is collective #n there, and every rank of that group must post the same
// operation (op, dtype and count) as its #n — MPI and NCCL both require it. So two ranks'
// records compare directly: a rank whose count on the group is below n has not arrived; one
// whose #n is another operation is in a different collective (a bug in the program, which MPI
// would turn into a hang or garbage). Point-to-point operations (async TP's ring steps) are
// recorded without a number: a send and its receive are different operations on their two
// ranks.
//
// The recorder keeps the last kHistory operations for the dump printed on an abort, and every
// operation still in flight however old (the watchdog times those out). One mutex guards it: a
// post costs a lock and a small copy, nothing against the collective it records.
//
// Nothing here calls MPI: the MPI watchdog (mpi_watchdog.h) reads the recorder and talks to
// the other ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace titan::parallel {

using RecorderClock = std::chrono::steady_clock;

// A communicator as another rank can recognise it: the mesh dims it spans and the world ranks
// of its group, in group order.
struct CommGroup {
  std::string name;              // "dp_shard", "dp_replicate×dp_shard", "world"
  std::vector<int> world_ranks;  // group rank g is world rank world_ranks[g]
};

struct OpRecord {
  uint64_t id = 0;             // this process's post order, from 1
  int comm = -1;               // the recorder's id of the communicator
  std::string comm_name;       // its CommGroup's name
  int64_t seq = 0;             // collectives: #seq on the communicator, from 1; point to point: 0
  std::string op;              // "all_reduce(Sum) of 2 f32", "send of 4096 bf16 to world rank 3"
  int64_t bytes = 0;           // this rank's side of it
  std::vector<int> waits_for;  // world ranks it cannot complete without (the group, or the peer)
  double timeout_s = 0;        // the watchdog's limit, fixed when it was posted
  RecorderClock::time_point posted;
  // When this rank began to wait for it (Work::wait, or a blocking call). An operation posted
  // early and waited for late (FSDP's prefetch) may well be complete inside MPI long before:
  // only the time a rank has been blocked on an operation says that something is stuck.
  std::optional<RecorderClock::time_point> wait_started;
  bool done = false;
  RecorderClock::time_point completed;  // when done

  // "#41 on dp_shard: all_reduce(Sum) of 2 f32 (8 B)"; point to point without the number.
  std::string describe() const;
  double age_s(RecorderClock::time_point now) const;  // since the post
  double blocked_s(RecorderClock::time_point now) const;  // since the wait began; 0 before
};

class CollectiveRecorder {
 public:
  static constexpr size_t kHistory = 256;

  // The process's recorder (tests may make their own).
  static CollectiveRecorder& instance();

  // A communicator was created (every rank of its group does this): returns its id here.
  int add_comm(CommGroup group);
  CommGroup group(int comm) const;

  // An operation was posted on communicator `comm`; returns its id for complete(). A collective
  // takes the next number on its communicator and waits for the whole group.
  uint64_t post_collective(int comm, std::string op, int64_t bytes, double timeout_s);
  uint64_t post_point_to_point(int comm, std::string op, int64_t bytes, int peer_world_rank,
                               double timeout_s);
  // This rank now blocks until operation `id` completes (a second call keeps the first time).
  void begin_wait(uint64_t id);
  void complete(uint64_t id);

  // The operation in flight this rank has been blocked on longest, and the first one it has
  // been blocked on for longer than its timeout.
  std::optional<OpRecord> blocked_on() const;
  std::optional<OpRecord> first_overdue(RecorderClock::time_point now) const;
  // The last `n` operations posted, oldest first (in flight or done).
  std::vector<OpRecord> recent(size_t n) const;

  // This rank's view of the communicator another rank calls `group` (same name and members):
  // how many collectives it posted there, and what its #seq was (when still in the history).
  struct GroupProgress {
    bool known = false;  // this rank has such a communicator
    int64_t posted = 0;
    std::optional<std::string> op_at_seq;
  };
  GroupProgress progress(const CommGroup& group, int64_t seq) const;

 private:
  struct Comm {
    CommGroup group;
    int64_t posted = 0;  // collectives
  };
  uint64_t post(OpRecord record);

  mutable std::mutex mutex_;
  std::vector<Comm> comms_;               // indexed by id
  std::deque<OpRecord> history_;          // the last kHistory posted, ids consecutive
  std::map<uint64_t, OpRecord> in_flight_;  // by id, whatever their age
  uint64_t next_id_ = 1;
};

}  // namespace titan::parallel
