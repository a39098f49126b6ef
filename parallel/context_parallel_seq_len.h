// The rule context parallelism's head-tail split sets a sequence length, apart from the split
// itself (context_parallel.h) so that the config's validation checks it without linking
// parallel/: the readers' fuzz targets link the validation alone.
#pragma once

#include <cstdint>
#include <string>

#include "core/check.h"

namespace titan::parallel {

// Throws an InputError naming `key` (e.g. "training.seq_len") unless S splits into 2·cp equal
// chunks.
inline void check_cp_seq_len(int64_t seq_len, int64_t cp, const std::string& key) {
  if (cp > 0 && seq_len > 0 && seq_len % (2 * cp) == 0) return;
  input_error(key, ": ", seq_len, " tokens do not split into 2·cp = ", 2 * cp,
              " equal chunks (context parallel degree ", cp,
              ", head-tail split); use a multiple of ", 2 * cp);
}

}  // namespace titan::parallel
