// The profiler (core/profiler.h): what is recorded when, and the Chrome trace it writes.
//
// Every written trace is read back by an independent parser — python3's json module — through
// a small script that prints one line per event (names hex-encoded, so that any byte survives
// the trip), so the checks hold the file to JSON itself, not to our own reader.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/cuda/device_query.h"
#include "core/profiler.h"
#include "support/process.h"

namespace titan {

namespace {

struct TraceEvent {
  std::string name, category, dims;
  int64_t pid = -1, tid = -1, bytes = -1;
  double ts = 0, dur = 0;
  bool unfinished = false;
  double end() const { return ts + dur; }
};

struct Trace {
  std::vector<TraceEvent> spans;                 // "ph": "X"
  std::map<int64_t, std::string> thread_names;   // tid → thread_name
  std::map<int64_t, std::string> process_names;  // pid → process_name
  std::vector<const TraceEvent*> named(const std::string& name) const {
    std::vector<const TraceEvent*> found;
    for (const TraceEvent& e : spans) {
      if (e.name == name) found.push_back(&e);
    }
    return found;
  }
};

std::string from_hex(const std::string& hex) {
  if (hex == "-") return "";
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

constexpr const char* kReader = R"(import json, sys
h = lambda s: s.encode('utf-8').hex() or '-'
with open(sys.argv[1], encoding='utf-8') as f:
    trace = json.load(f)
assert set(trace) == {'traceEvents', 'displayTimeUnit'}, sorted(trace)
assert trace['displayTimeUnit'] == 'ms'
for e in trace['traceEvents']:
    if e['ph'] == 'X':
        a = e.get('args', {})
        print('X', h(e['name']), h(e['cat']), e['pid'], e['tid'], repr(float(e['ts'])),
              repr(float(e['dur'])), h(a.get('dims', '')), a.get('bytes', -1),
              int(a.get('unfinished', False)))
    elif e['ph'] == 'M' and e['name'] in ('thread_name', 'process_name'):
        print('M', e['name'], e['pid'], e['tid'], h(e['args']['name']))
)";

// Parses the file with python3's json and returns its events; fails the test if it does not
// parse.
Trace read_trace(const std::string& path) {
  const std::string script = testing::scratch_dir("test_profiler") + "/read_trace.py";
  std::ofstream(script) << kReader;
  const testing::ProcessResult result =
      testing::run_process("python3 '" + script + "' '" + path + "'");
  REQUIRE_MESSAGE(result.exit_code == 0, "python3 could not read ", path,
                  " as a Chrome trace: ", result.err);
  Trace trace;
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "X") {
      TraceEvent e;
      std::string name, category, dims;
      int unfinished = 0;
      in >> name >> category >> e.pid >> e.tid >> e.ts >> e.dur >> dims >> e.bytes >> unfinished;
      e.name = from_hex(name);
      e.category = from_hex(category);
      e.dims = from_hex(dims);
      e.unfinished = unfinished != 0;
      trace.spans.push_back(e);
    } else {
      std::string what, name;
      int64_t pid = 0, tid = 0;
      in >> what >> pid >> tid >> name;
      (what == "thread_name" ? trace.thread_names[tid] : trace.process_names[pid]) = from_hex(name);
    }
  }
  return trace;
}

std::string trace_path(const std::string& name) {
  return testing::scratch_dir("test_profiler") + "/" + name + ".json";
}

// a contains b, in time, on the same track (the parser's floats: a nanosecond of slack).
bool nests_in(const TraceEvent& inner, const TraceEvent& outer) {
  return inner.tid == outer.tid && inner.ts >= outer.ts - 1e-3 && inner.end() <= outer.end() + 1e-3;
}

void busy_for(std::chrono::microseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("profiler: nothing is recorded while off — and names are not built") {
    REQUIRE_FALSE(profiler::recording());
    int built = 0;
    auto name = [&] {
      ++built;
      return std::string("built");
    };
    {
      profiler::Span span("before", "test");
      TT_PROFILE_SPAN(name(), "test");
    }
    CHECK(built == 0);
    profiler::start_recording(3, false);
    CHECK(profiler::recording());
    { profiler::Span span("during", "test"); }
    const std::string path = trace_path("off");
    profiler::stop_and_write(path);
    CHECK_FALSE(profiler::recording());
    { profiler::Span span("after", "test"); }
    CHECK(built == 0);

    const Trace trace = read_trace(path);
    REQUIRE(trace.spans.size() == 1);
    CHECK(trace.spans[0].name == "during");
    CHECK(trace.spans[0].category == "test");
    CHECK(trace.spans[0].pid == 3);
    CHECK(trace.process_names.at(3) == "rank 3");

    // The next recording starts empty: nothing of the last one, nothing of the time between.
    profiler::start_recording(3, false);
    profiler::stop_and_write(path);
    CHECK(read_trace(path).spans.empty());
  }

  TEST_CASE("profiler: nested spans nest in the trace") {
    profiler::start_recording(0, false);
    {
      profiler::Span step("step", "trainer");
      for (int block = 0; block < 2; ++block) {
        TT_PROFILE_SPAN("block." + std::to_string(block) + ".forward", "model");
        profiler::Span gemm("layers.0.attention.wqkv.output", "gemm");
        busy_for(std::chrono::microseconds(50));
      }
      profiler::Span optimizer("optimizer", "optimizer");
      busy_for(std::chrono::microseconds(50));
    }
    const std::string path = trace_path("nesting");
    profiler::stop_and_write(path);

    const Trace trace = read_trace(path);
    REQUIRE(trace.spans.size() == 6);
    const TraceEvent& step = *trace.named("step").at(0);
    const TraceEvent& block0 = *trace.named("block.0.forward").at(0);
    const TraceEvent& block1 = *trace.named("block.1.forward").at(0);
    const auto gemms = trace.named("layers.0.attention.wqkv.output");
    REQUIRE(gemms.size() == 2);
    CHECK(block0.category == "model");
    CHECK(nests_in(block0, step));
    CHECK(nests_in(block1, step));
    CHECK(nests_in(*gemms[0], block0));
    CHECK(nests_in(*gemms[1], block1));
    CHECK(block0.end() <= block1.ts + 1e-3);  // siblings one after the other
    CHECK(nests_in(*trace.named("optimizer").at(0), step));
    CHECK(gemms[0]->dur >= 50.0);
    CHECK(trace.thread_names.at(step.tid) == "main");
  }

  TEST_CASE("profiler: every thread gets its own track") {
    constexpr int kThreads = 4, kSpansEach = 100;
    profiler::start_recording(1, false);
    profiler::Span main_span("main work", "test");
    {
      std::vector<std::jthread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([t] {
          for (int i = 0; i < kSpansEach; ++i) {
            TT_PROFILE_SPAN("worker." + std::to_string(t), "test");
            profiler::Span inner("inner", "test");
          }
        });
      }
    }
    const std::string path = trace_path("threads");
    profiler::stop_and_write(path);  // "main work" is still open: written as unfinished

    const Trace trace = read_trace(path);
    const TraceEvent& main_work = *trace.named("main work").at(0);
    CHECK(main_work.unfinished);
    std::set<int64_t> worker_tracks;
    for (int t = 0; t < kThreads; ++t) {
      const auto spans = trace.named("worker." + std::to_string(t));
      REQUIRE(spans.size() == kSpansEach);
      for (const TraceEvent* e : spans) CHECK(e->tid == spans[0]->tid);
      worker_tracks.insert(spans[0]->tid);
      CHECK(trace.thread_names.count(spans[0]->tid) == 1);
    }
    CHECK(worker_tracks.size() == kThreads);
    CHECK(worker_tracks.count(main_work.tid) == 0);
    // Every "inner" sits inside a worker span of its own track.
    const auto inner = trace.named("inner");
    CHECK(inner.size() == kThreads * kSpansEach);
    for (const TraceEvent* e : inner) CHECK(worker_tracks.count(e->tid) == 1);
  }

  TEST_CASE("profiler: collectives carry their dims and bytes — any name survives the file") {
    // Quotes, a backslash, control characters, UTF-8 (×) and a byte that is not UTF-8.
    const std::string odd = "q\"uote\\ \n\t\x01 dp_replicate\xc3\x97tp \xff end";
    const std::string odd_written = "q\"uote\\ \n\t\x01 dp_replicate\xc3\x97tp \xef\xbf\xbd end";
    profiler::start_recording(2, false);
    {
      profiler::Span collective("all_reduce", "comm", "dp_replicate×dp_shard", 4096);
      profiler::Span named(odd, "test");
    }
    const std::string path = trace_path("args");
    profiler::stop_and_write(path);

    const Trace trace = read_trace(path);
    const TraceEvent& collective = *trace.named("all_reduce").at(0);
    CHECK(collective.dims == "dp_replicate×dp_shard");
    CHECK(collective.bytes == 4096);
    CHECK(collective.category == "comm");
    REQUIRE(trace.named(odd_written).size() == 1);
    CHECK(trace.named(odd_written)[0]->bytes == -1);  // not a collective: no args
  }

  TEST_CASE("profiler: an unwritable trace path throws — naming it") {
    const std::string path = "/nonexistent-titan-folder/trace.json";
    profiler::start_recording(0, false);
    { profiler::Span span("lost", "test"); }
    std::string message;
    try {
      profiler::stop_and_write(path);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(message.find(path) != std::string::npos);
    CHECK_FALSE(profiler::recording());
  }

  TEST_CASE("profiler: device spans need the CUDA backend") {
    if (built_with_cuda()) return;  // a CUDA build with a device is test/gpu's business
    CHECK_THROWS_AS(profiler::start_recording(0, true), Error);
    CHECK_FALSE(profiler::recording());
  }

  TEST_CASE("profiler: a span costs a few nanoseconds when off") {
    // Loose bounds only (shared CI machines); the figure is printed for docs/. Each figure is
    // the best of five runs of 10^6 spans, loop included, so it is an upper bound per span.
    REQUIRE_FALSE(profiler::recording());
    constexpr int kSpans = 1'000'000, kRuns = 5;
    auto measure = [&](auto&& body) {
      double best = 1e30;
      for (int run = 0; run < kRuns; ++run) {
        const auto begin = std::chrono::steady_clock::now();
        for (int i = 0; i < kSpans; ++i) {
          body(i);
          asm volatile("" ::: "memory");  // keeps the loop, and each span in it
        }
        const auto end = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::nano>(end - begin).count());
      }
      return best / kSpans;
    };
    const double empty = measure([](int) {});
    const double literal = measure([](int) { profiler::Span span("forward", "model"); });
    const double runtime_name =
        measure([](int i) { TT_PROFILE_SPAN("block." + std::to_string(i) + ".forward", "model"); });
    const double collective = measure(
        [](int i) { profiler::Span span("all_reduce", "comm", "dp_replicate×dp_shard", i); });
    MESSAGE("ns per iteration when off: empty loop ", empty, ", literal span ", literal,
            ", run-time name ", runtime_name, ", collective ", collective);
    CHECK(literal < 200);
    CHECK(runtime_name < 200);
    CHECK(collective < 200);
  }
}

}  // namespace titan
