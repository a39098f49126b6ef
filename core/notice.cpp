#include "core/notice.h"

#include <cstdio>
#include <mutex>
#include <utility>

namespace titan {

namespace {

std::mutex sink_mutex;
std::function<void(const std::string&)> notice_sink;

}  // namespace

void notice(const std::string& line) {
  std::lock_guard lock(sink_mutex);
  if (notice_sink) return notice_sink(line);
  std::fprintf(stderr, "titan: %s\n", line.c_str());
}

void set_notice_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard lock(sink_mutex);
  notice_sink = std::move(sink);
}

}  // namespace titan
