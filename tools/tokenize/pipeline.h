// Every core on one corpus: a reader thread cuts the files into batches of whole lines
// (data/corpus_reader.h), `threads` workers parse and tokenize batches as they come, and the
// calling thread receives the results in input order, whatever order the workers finish in.
// The output is therefore the same for any thread count.
//
// Memory is bounded: the reader stops while 2·threads + 2 batches are read but not yet
// consumed (a batch is --batch-bytes of text, 256 KiB by default, and its tokens: ~1.3 MB with
// the byte tokenizer), so a slow batch holds the reader back rather than letting the finished
// ones pile up behind it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/corpus_reader.h"
#include "data/tokenizer.h"

namespace titan::tokenize {

// The bad lines a report names; the rest are only counted.
constexpr size_t kBadLinesKept = 5;

struct BadLine {
  size_t file_index = 0;
  int64_t line = 0;
  std::string problem;  // "invalid JSON (…)", "no field \"text\"", …
};

struct TokenizedBatch {
  int64_t sequence = 0;
  size_t file_index = 0;
  std::vector<int32_t> tokens;  // its documents' encode_document, back to back
  int64_t documents = 0;        // tokenized (empty documents are skipped, not counted here)
  int64_t empty_documents = 0;
  int64_t null_documents = 0;  // Parquet nulls, skipped
  int64_t bad_lines = 0;
  std::vector<BadLine> first_bad_lines;  // the first kBadLinesKept, in line order
  uint64_t text_bytes = 0;               // bytes of the tokenized documents' text
  uint64_t bytes_read = 0;               // LineBatch::bytes_read
};

struct PipelineHooks {
  // Each batch in input order, on the calling thread. May throw: the pipeline stops, joins its
  // threads and rethrows.
  std::function<void(TokenizedBatch&)> consume;
  // Called on the calling thread while it waits for the next batch, about 5 times a second.
  std::function<void()> idle;
};

// Runs until the last batch is consumed. Rethrows the first failure in input order: a file
// that cannot be read (InputError from the reader), a tokenizer error, or one from consume.
void run_pipeline(data::CorpusReader& reader, const data::Tokenizer& tokenizer,
                  const std::string& field, int threads, const PipelineHooks& hooks);

// One batch, decoded (CorpusReader::decode), on the calling thread: what each worker runs.
TokenizedBatch tokenize_batch(const data::LineBatch& batch, data::CorpusFormat format,
                              const data::Tokenizer& tokenizer, data::DocumentParser& parser);

}  // namespace titan::tokenize
