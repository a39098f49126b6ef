// One titan_tokenize run: inputs expanded, tokenizer loaded and output folder checked (each an
// InputError before any corpus byte is read), then the pipeline (pipeline.h) into the shard
// writer (shard_writer.h), with progress on stderr (progress_report.h).
//
// Prints a start line and a summary on stdout; bad lines (counted, the first few named by
// file:line) in one warning line on stderr. With --strict the first bad line, in input order,
// is an InputError naming it instead.
#pragma once

#include <cstdint>

#include "tools/tokenize/options.h"

namespace titan::tokenize {

struct TokenizeSummary {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t empty_documents = 0;
  int64_t null_documents = 0;
  int64_t bad_lines = 0;
  int64_t tokens = 0;
  int64_t shards = 0;
  uint64_t bytes_read = 0;  // of the files (compressed)
  uint64_t text_bytes = 0;  // of the tokenized documents
  double seconds = 0;
};

TokenizeSummary tokenize_corpus(const TokenizeOptions& options);

}  // namespace titan::tokenize
