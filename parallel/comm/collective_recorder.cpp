#include "parallel/comm/collective_recorder.h"

#include <algorithm>

#include "core/check.h"

namespace titan::parallel {

std::string OpRecord::describe() const {
  if (seq == 0) return detail::concat(op, " on ", comm_name, " (", bytes, " B)");
  return detail::concat("#", seq, " on ", comm_name, ": ", op, " (", bytes, " B)");
}

double OpRecord::age_s(RecorderClock::time_point now) const {
  return std::chrono::duration<double>(now - posted).count();
}

double OpRecord::blocked_s(RecorderClock::time_point now) const {
  return wait_started ? std::chrono::duration<double>(now - *wait_started).count() : 0.0;
}

CollectiveRecorder& CollectiveRecorder::instance() {
  static CollectiveRecorder recorder;
  return recorder;
}

int CollectiveRecorder::add_comm(CommGroup group) {
  std::lock_guard lock(mutex_);
  comms_.push_back({std::move(group), 0});
  return static_cast<int>(comms_.size()) - 1;
}

CommGroup CollectiveRecorder::group(int comm) const {
  std::lock_guard lock(mutex_);
  TT_CHECK(comm >= 0 && comm < static_cast<int>(comms_.size()),
           "CollectiveRecorder: unknown communicator id ", comm);
  return comms_[comm].group;
}

uint64_t CollectiveRecorder::post_collective(int comm, std::string op, int64_t bytes,
                                             double timeout_s) {
  OpRecord record;
  record.comm = comm;
  record.op = std::move(op);
  record.bytes = bytes;
  record.timeout_s = timeout_s;
  return post(std::move(record));
}

uint64_t CollectiveRecorder::post_point_to_point(int comm, std::string op, int64_t bytes,
                                                 int peer_world_rank, double timeout_s) {
  OpRecord record;
  record.comm = comm;
  record.seq = -1;  // post() leaves it unnumbered
  record.op = std::move(op);
  record.bytes = bytes;
  record.waits_for = {peer_world_rank};
  record.timeout_s = timeout_s;
  return post(std::move(record));
}

uint64_t CollectiveRecorder::post(OpRecord record) {
  record.posted = RecorderClock::now();
  std::lock_guard lock(mutex_);
  TT_CHECK(record.comm >= 0 && record.comm < static_cast<int>(comms_.size()),
           "CollectiveRecorder: unknown communicator id ", record.comm);
  Comm& comm = comms_[record.comm];
  record.comm_name = comm.group.name;
  if (record.seq == -1) {
    record.seq = 0;
  } else {
    record.seq = ++comm.posted;
    record.waits_for = comm.group.world_ranks;
  }
  record.id = next_id_++;
  in_flight_.emplace(record.id, record);
  history_.push_back(std::move(record));
  if (history_.size() > kHistory) history_.pop_front();
  return history_.back().id;
}

void CollectiveRecorder::begin_wait(uint64_t id) {
  const RecorderClock::time_point now = RecorderClock::now();
  std::lock_guard lock(mutex_);
  auto it = in_flight_.find(id);
  if (it == in_flight_.end() || it->second.wait_started) return;
  it->second.wait_started = now;
  if (!history_.empty() && id >= history_.front().id && id <= history_.back().id) {
    history_[id - history_.front().id].wait_started = now;
  }
}

void CollectiveRecorder::complete(uint64_t id) {
  const RecorderClock::time_point now = RecorderClock::now();
  std::lock_guard lock(mutex_);
  in_flight_.erase(id);
  if (history_.empty() || id < history_.front().id || id > history_.back().id) return;
  OpRecord& record = history_[id - history_.front().id];
  record.done = true;
  record.completed = now;
}

std::optional<OpRecord> CollectiveRecorder::blocked_on() const {
  std::lock_guard lock(mutex_);
  const OpRecord* longest = nullptr;
  for (const auto& [id, record] : in_flight_) {
    if (record.wait_started && (!longest || *record.wait_started < *longest->wait_started)) {
      longest = &record;
    }
  }
  if (!longest) return std::nullopt;
  return *longest;
}

std::optional<OpRecord> CollectiveRecorder::first_overdue(RecorderClock::time_point now) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, record] : in_flight_) {
    if (record.wait_started && record.blocked_s(now) > record.timeout_s) return record;
  }
  return std::nullopt;
}

std::vector<OpRecord> CollectiveRecorder::recent(size_t n) const {
  std::lock_guard lock(mutex_);
  const size_t count = std::min(n, history_.size());
  return {history_.end() - static_cast<std::ptrdiff_t>(count), history_.end()};
}

CollectiveRecorder::GroupProgress CollectiveRecorder::progress(const CommGroup& group,
                                                               int64_t seq) const {
  std::lock_guard lock(mutex_);
  GroupProgress progress;
  // The newest communicator with that name and those members (a program may free one and make
  // it again; the old one's count no longer matters).
  int comm = -1;
  for (int c = static_cast<int>(comms_.size()) - 1; c >= 0; --c) {
    if (comms_[c].group.name == group.name && comms_[c].group.world_ranks == group.world_ranks) {
      comm = c;
      break;
    }
  }
  if (comm < 0) return progress;
  progress.known = true;
  progress.posted = comms_[comm].posted;
  for (const OpRecord& record : history_) {
    if (record.comm == comm && record.seq == seq) progress.op_at_seq = record.op;
  }
  return progress;
}

}  // namespace titan::parallel
