// Which files a corpus is: titan_tokenize's INPUT arguments (files, folders, glob patterns)
// expanded into one ordered list, each file with its format and compression read from its name.
//
//   name (after an optional .gz / .zst / .zstd)   format
//   .jsonl  .json  .ndjson                         JSON lines: one object per line
//   .parquet (never compressed as a whole)         Parquet: one string column, a row a document
//   anything else                                  text: one document per line
//
// A file named on the command line is read whatever its name; inside a folder only .txt,
// .jsonl, .json and .ndjson files (optionally compressed) and .parquet files are taken, so a
// README or a .bin
// shard beside them is not tokenized, and names starting with '.' are skipped. The order is
// the command line's, a folder's files sorted by path (recursively), a pattern's matches as
// glob(3) sorts them: the token stream, and so every shard, depends on nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/byte_stream.h"

namespace titan::data {

enum class CorpusFormat { TEXT, JSON_LINES, PARQUET };

struct CorpusFile {
  std::string path;
  CorpusFormat format = CorpusFormat::TEXT;
  Compression compression = Compression::NONE;
  uint64_t bytes = 0;  // size on disk (compressed)
};

// Format and compression from the name alone.
CorpusFile classify_corpus_file(const std::string& path, uint64_t bytes);

// "JSON lines, gzip", "text", "Parquet": for logs.
std::string describe_corpus_file(const CorpusFile& file);

// Every file of `inputs` in order. InputError for an input that does not exist, a pattern
// that matches nothing and a folder holding no corpus file.
std::vector<CorpusFile> expand_corpus_inputs(const std::vector<std::string>& inputs);

}  // namespace titan::data
