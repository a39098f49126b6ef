// titan_tokenize's progress on stderr: on a terminal one line redrawn in place ("\r") at most
// 5 times a second,
//
//   [#########-----------]  45%  12.3/27.1 MB  31102 docs  4329000 tokens  3.4 MB/s  ETA 5.1s
//
// and otherwise (a log file, a pipe) a plain line every `plain_interval_s` seconds:
//
//   titan_tokenize: 45% of 27.1 MB read, 31102 documents, 4329000 tokens, 3.4 MB/s, ETA 5.1s
//
// Bytes are the input files' own (compressed for .gz and .zst) against the sum of their sizes,
// so the percentage and ETA hold for compressed corpora too. MB is 10^6 bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace titan::tokenize {

struct TokenizeCounts {
  uint64_t bytes_read = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
};

class ProgressReport {
 public:
  ProgressReport(uint64_t total_bytes, bool terminal, double plain_interval_s,
                 std::FILE* out = stderr);

  // Draws `counts` if it is time to.
  void update(const TokenizeCounts& counts);
  // Ends the terminal line (drawn once more, complete); nothing in the plain form. Call before
  // anything else is printed.
  void finish();

  double elapsed_s() const;

  // The two forms, for given figures (tests and update()).
  static std::string terminal_line(const TokenizeCounts& counts, uint64_t total_bytes,
                                   double elapsed_s);
  static std::string plain_line(const TokenizeCounts& counts, uint64_t total_bytes,
                                double elapsed_s);

 private:
  using Clock = std::chrono::steady_clock;

  uint64_t total_bytes_;
  bool terminal_;
  double interval_s_;
  std::FILE* out_;
  Clock::time_point start_ = Clock::now();
  double last_drawn_s_ = 0;
  TokenizeCounts last_;
};

}  // namespace titan::tokenize
