#include "tools/tokenize/progress_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/progress.h"

namespace titan::tokenize {

namespace {

constexpr double kTerminalInterval = 0.2;  // seconds between redraws of the terminal line
constexpr int kBarWidth = 20;

struct Figures {
  double fraction;  // of the bytes read, 0…1
  double mb_read, mb_total, mb_per_s;
  std::string eta;
};

Figures figures(const TokenizeCounts& counts, uint64_t total_bytes, double elapsed_s) {
  Figures f;
  f.fraction = total_bytes == 0 ? 1.0
                                : std::min(1.0, static_cast<double>(counts.bytes_read) /
                                                    static_cast<double>(total_bytes));
  f.mb_read = static_cast<double>(counts.bytes_read) / 1e6;
  f.mb_total = static_cast<double>(total_bytes) / 1e6;
  f.mb_per_s = elapsed_s > 0 ? f.mb_read / elapsed_s : 0.0;
  const double left = f.mb_total - f.mb_read;
  f.eta = f.mb_per_s > 0 ? format_duration(std::max(0.0, left) / f.mb_per_s) : "?";
  return f;
}

}  // namespace

ProgressReport::ProgressReport(uint64_t total_bytes, bool terminal, double plain_interval_s,
                               std::FILE* out)
    : total_bytes_(total_bytes), terminal_(terminal), interval_s_(plain_interval_s), out_(out) {}

double ProgressReport::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

std::string ProgressReport::terminal_line(const TokenizeCounts& counts, uint64_t total_bytes,
                                          double elapsed_s) {
  const Figures f = figures(counts, total_bytes, elapsed_s);
  const int filled = static_cast<int>(f.fraction * kBarWidth);
  return fmt::format("[{}{}] {:3.0f}%  {:.1f}/{:.1f} MB  {} docs  {} tokens  {:.1f} MB/s  ETA {}",
                     std::string(filled, '#'), std::string(kBarWidth - filled, '-'),
                     100 * f.fraction, f.mb_read, f.mb_total, counts.documents, counts.tokens,
                     f.mb_per_s, f.eta);
}

std::string ProgressReport::plain_line(const TokenizeCounts& counts, uint64_t total_bytes,
                                       double elapsed_s) {
  const Figures f = figures(counts, total_bytes, elapsed_s);
  return fmt::format(
      "titan_tokenize: {:.0f}% of {:.1f} MB read, {} documents, {} tokens, {:.1f} MB/s, ETA {}",
      100 * f.fraction, f.mb_total, counts.documents, counts.tokens, f.mb_per_s, f.eta);
}

void ProgressReport::update(const TokenizeCounts& counts) {
  last_ = counts;
  const double now = elapsed_s();
  if (now - last_drawn_s_ < (terminal_ ? kTerminalInterval : interval_s_)) return;
  last_drawn_s_ = now;
  if (terminal_) {
    // "\x1b[K" clears what a longer earlier line left to the right.
    fmt::print(out_, "\r{}\x1b[K", terminal_line(counts, total_bytes_, now));
  } else {
    fmt::print(out_, "{}\n", plain_line(counts, total_bytes_, now));
  }
  std::fflush(out_);
}

void ProgressReport::finish() {
  if (!terminal_) return;
  fmt::print(out_, "\r{}\x1b[K\n", terminal_line(last_, total_bytes_, elapsed_s()));
  std::fflush(out_);
}

}  // namespace titan::tokenize
