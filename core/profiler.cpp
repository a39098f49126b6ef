// The host half of the profiler: one recording per process, spans kept in one vector under a
// mutex (a span costs a lock only while recording, which is a few chosen steps), tracks by
// thread, and the Chrome trace writer. The device half is core/cuda/profiler_device.h.
#include "core/profiler.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/cuda/profiler_device.h"
#include "core/json_text.h"

namespace titan::profiler {

namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

using Clock = std::chrono::steady_clock;

// Device tracks are numbered after the host threads, far enough that no run has that many.
constexpr int32_t kDeviceTrackBase = 1000;

struct Record {
  const char* literal = nullptr;  // the name when it is a literal, else null and `owned` holds it
  std::string owned;
  const char* category = nullptr;
  std::string dims;
  int64_t bytes = -1;  // -1: not a collective
  int32_t track = 0;
  int32_t device = -1;  // slot of its CUDA event pair
  int64_t begin_ns = 0;
  int64_t end_ns = -1;  // -1 while open

  std::string_view name() const {
    return literal != nullptr ? std::string_view(literal) : std::string_view(owned);
  }
};

struct Recording {
  std::mutex mutex;
  uint32_t generation = 0;  // bumped by start_recording: spans of an older one are dropped
  int rank = 0;
  bool on_cuda = false;
  Clock::time_point start;
  std::vector<Record> records;
  std::vector<std::string> track_names;  // by host track
};

Recording& recording_state() {
  static Recording state;
  return state;
}

// This thread's track in the recording of `generation` (-1: not given one yet).
struct ThreadTrack {
  uint32_t generation = 0;
  int32_t track = -1;
};
thread_local ThreadTrack t_track;

int64_t nanoseconds_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

// Called with the lock held.
int32_t track_of_this_thread(Recording& r) {
  if (t_track.generation != r.generation || t_track.track < 0) {
    t_track.generation = r.generation;
    t_track.track = static_cast<int32_t>(r.track_names.size());
    r.track_names.push_back(t_track.track == 0 ? "main"
                                               : "thread " + std::to_string(t_track.track));
  }
  return t_track.track;
}

// ---- JSON --------------------------------------------------------------------------------

// Nanoseconds as microseconds with three decimals, exactly (no floating-point rounding, so a
// child's end never passes its parent's).
void append_microseconds(std::string& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out += buf;
}

void append_metadata(std::string& out, const char* what, int rank, int32_t tid,
                     std::string_view name, int64_t sort_index) {
  out += "{\"name\":\"";
  out += what;
  out += "\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(tid);
  out += ",\"args\":{\"name\":";
  append_json_string(out, name);
  out += "}},\n";
  if (sort_index < 0) return;
  out += "{\"name\":\"";
  out += std::string_view(what) == "process_name" ? "process_sort_index" : "thread_sort_index";
  out += "\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(tid);
  out += ",\"args\":{\"sort_index\":" + std::to_string(sort_index) + "}},\n";
}

struct Complete {
  const Record* record = nullptr;
  int32_t tid = 0;
  int64_t begin_ns = 0, end_ns = 0;
  bool unfinished = false;
};

void append_complete(std::string& out, const Complete& e, int rank) {
  const Record& r = *e.record;
  out += "{\"name\":";
  append_json_string(out, r.name());
  out += ",\"cat\":";
  append_json_string(out, r.category != nullptr ? r.category : "");
  out += ",\"ph\":\"X\",\"ts\":";
  append_microseconds(out, e.begin_ns);
  out += ",\"dur\":";
  append_microseconds(out, std::max<int64_t>(0, e.end_ns - e.begin_ns));
  out += ",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(e.tid);
  const bool collective = r.bytes >= 0 || !r.dims.empty();
  if (collective || e.unfinished) {
    out += ",\"args\":{";
    if (collective) {
      out += "\"dims\":";
      append_json_string(out, r.dims);
      out += ",\"bytes\":" + std::to_string(std::max<int64_t>(r.bytes, 0));
    }
    if (e.unfinished) out += collective ? ",\"unfinished\":true" : "\"unfinished\":true";
    out += '}';
  }
  out += "},\n";
}

std::string device_track_name(int32_t stream) {
  return stream == 0 ? "cuda stream" : "cuda stream " + std::to_string(stream + 1);
}

// The whole trace. Events sorted by track, then begin, then longest first, so that viewers
// nest spans that begin on the same microsecond the right way round.
std::string trace_json(const Recording& r, int64_t stop_ns,
                       const std::vector<device::Interval>& device_intervals) {
  std::vector<Complete> events;
  events.reserve(r.records.size() * (r.on_cuda ? 2 : 1));
  int32_t device_streams = 0;
  for (const Record& record : r.records) {
    const bool unfinished = record.end_ns < 0;
    events.push_back(
        {&record, record.track, record.begin_ns, unfinished ? stop_ns : record.end_ns, unfinished});
    if (record.device < 0 || record.device >= static_cast<int32_t>(device_intervals.size()))
      continue;
    const device::Interval& d = device_intervals[record.device];
    if (!d.valid) continue;
    device_streams = std::max(device_streams, d.stream + 1);
    events.push_back({&record, kDeviceTrackBase + d.stream, std::llround(d.begin_us * 1000.0),
                      std::llround(d.end_us * 1000.0), false});
  }
  std::stable_sort(events.begin(), events.end(), [](const Complete& a, const Complete& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;
  });

  std::string out = "{\"traceEvents\":[\n";
  append_metadata(out, "process_name", r.rank, 0, "rank " + std::to_string(r.rank), r.rank);
  for (size_t t = 0; t < r.track_names.size(); ++t) {
    append_metadata(out, "thread_name", r.rank, static_cast<int32_t>(t), r.track_names[t],
                    static_cast<int64_t>(t));
  }
  for (int32_t s = 0; s < device_streams; ++s) {
    append_metadata(out, "thread_name", r.rank, kDeviceTrackBase + s, device_track_name(s),
                    kDeviceTrackBase + s);
  }
  for (const Complete& e : events) append_complete(out, e, r.rank);
  // Drop the last separator: JSON has no trailing commas.
  out.erase(out.size() - 2);
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    throw Error(titan::detail::concat("profiler: cannot write the trace to '", path,
                                      "': ", std::strerror(errno),
                                      "; check that its folder exists and is writable"));
  }
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  if (!file) {
    throw Error(titan::detail::concat("profiler: writing the trace to '", path,
                                      "' failed: ", std::strerror(errno), " (disk full?)"));
  }
}

}  // namespace

void Span::begin(const char* literal, std::string owned, const char* category,
                 std::string_view dims, int64_t bytes) {
  Recording& r = recording_state();
  std::lock_guard lock(r.mutex);
  // Stopped between the caller's check and the lock: record nothing.
  if (!recording()) return;
  Record record;
  record.literal = literal;
  record.owned = std::move(owned);
  record.category = category;
  record.dims = dims;
  record.bytes = bytes;
  record.track = track_of_this_thread(r);
  if (r.on_cuda) {
    // Before the host timestamp: the push and the event record are part of what the span costs
    // its caller, not of what it measures.
    device_ = device::begin(literal != nullptr ? literal : record.owned.c_str());
    record.device = device_;
    if (device_ < 0) device_ = std::numeric_limits<int32_t>::max();  // the NVTX range to pop
  }
  record.begin_ns = nanoseconds_since(r.start);
  index_ = static_cast<int64_t>(r.records.size());
  generation_ = r.generation;
  r.records.push_back(std::move(record));
}

void Span::end() noexcept {
  Recording& r = recording_state();
  std::lock_guard lock(r.mutex);
  const bool current = generation_ == r.generation && recording();
  if (current) r.records[static_cast<size_t>(index_)].end_ns = nanoseconds_since(r.start);
  if (device_ >= 0) {
    const int32_t slot = device_ == std::numeric_limits<int32_t>::max() ? -1 : device_;
    device::end(slot, current);
  }
}

void start_recording(int rank, bool on_cuda) {
  Recording& r = recording_state();
  std::lock_guard lock(r.mutex);
  detail::g_recording.store(false, std::memory_order_relaxed);
  ++r.generation;
  r.rank = rank;
  r.on_cuda = on_cuda;
  r.records.clear();
  r.track_names.clear();
  // The device's time base first: it waits for the current stream, and host time starts after.
  if (on_cuda) device::start();
  r.start = Clock::now();
  detail::g_recording.store(true, std::memory_order_release);
}

void stop_and_write(const std::string& path) {
  Recording& r = recording_state();
  std::string json;
  {
    std::lock_guard lock(r.mutex);
    const bool was_recording = recording();
    detail::g_recording.store(false, std::memory_order_relaxed);
    const int64_t stop_ns = was_recording ? nanoseconds_since(r.start) : 0;
    std::vector<device::Interval> intervals;
    if (r.on_cuda) intervals = device::finish();
    json = trace_json(r, stop_ns, intervals);
    // Spans still open belong to this recording; their ends find a new generation.
    ++r.generation;
    r.records.clear();
    r.records.shrink_to_fit();
    r.track_names.clear();
  }
  write_file(path, json);
}

}  // namespace titan::profiler
