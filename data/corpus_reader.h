// Documents out of corpus files (data/corpus_files.h), in two steps so that the slow one runs on
// every core: CorpusReader cuts the files into batches of whole lines (one thread: reading and
// decompressing are sequential), and DocumentParser turns each line of a batch into a
// document (any thread, one parser each).
//
// A document is one line: of a text file the line itself, of a JSON lines file the string
// field named by `field` of the object on the line (its "\n"s and all), of a Parquet file the
// string column's value on a row (data/parquet_reader.h; nulls are counted, not documents).
// Parquet files are cut by row group, not by line: the reader thread reads a row group's chunk
// of the column as it lies in the file and decode() turns it into documents on a worker, so that
// decompression runs on every core as tokenizing does. The line terminator
// ("\n" or "\r\n") is not part of it, nor a UTF-8 byte-order mark opening a file. With
// TextDocuments::FILE a text file is instead one document, every byte of it, as titan_train
// reads a text file itself (data.format: text); JSON lines files are read by line still. A line
// that should hold a document and does not (invalid JSON, not an object, no such field, a field
// that is not a string) is a bad line, with a one-phrase reason. An empty line, or an empty
// field, is an empty document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/byte_stream.h"
#include "data/corpus_files.h"
#include "data/parquet_reader.h"

namespace titan {
class JsonDocument;
}

namespace titan::data {

enum class TextDocuments { LINE, FILE };

// Whole lines of one file, or one row group of a Parquet file: the unit a worker tokenizes.
struct LineBatch {
  int64_t sequence = 0;      // 0, 1, 2, … over the whole corpus: results are put back in order
  size_t file_index = 0;     // into the reader's files
  int64_t first_line = 1;    // line number (from 1) of the first line in its file; of Parquet,
                             // the row number (from 1) of the row group's first row
  std::string text;          // the lines, terminators removed, back to back
  std::vector<size_t> ends;  // line i is text[ends[i-1], ends[i]), ends[-1] = 0
  uint64_t bytes_read = 0;   // file bytes (compressed) read of the whole corpus when it was cut
  // Parquet: the row group (-1 for other files), its column chunk as read and not yet decoded
  // (empty once decode() has run), and its nulls (once decoded).
  int64_t row_group = -1;
  std::string chunk;
  int64_t nulls = 0;

  size_t lines() const { return ends.size(); }
  std::string_view line(size_t i) const {
    size_t begin = i == 0 ? 0 : ends[i - 1];
    return std::string_view(text).substr(begin, ends[i] - begin);
  }
};

// The string column read from Parquet files, and the caller's name for its option (for the
// messages: "name its text column with --field").
struct ParquetColumnChoice {
  std::string name = "text";
  std::string flag = "the column's name";
};

class CorpusReader {
 public:
  // Batches of about `batch_bytes` (at least one line each, never two files; a Parquet row
  // group whatever its size). Every Parquet file's footer is read and its column checked here,
  // so that a bad file late in the list is an InputError before any is tokenized.
  CorpusReader(std::vector<CorpusFile> files, size_t batch_bytes,
               TextDocuments text_documents = TextDocuments::LINE,
               const ParquetColumnChoice& parquet_column = {});
  ~CorpusReader();

  // The next batch; false after the last line of the last file. InputError naming the file
  // when one cannot be read or is corrupt or truncated.
  bool next(LineBatch& batch);

  // A Parquet batch's chunk decoded into its lines (its values; nulls counted), on any thread;
  // nothing for other batches. InputError naming the file, row group and column: a corrupt
  // page, a CRC mismatch, an encoding outside the subset read.
  void decode(LineBatch& batch) const;

  const std::vector<CorpusFile>& files() const { return files_; }

 private:
  bool fill(LineBatch& batch);  // true when the file has ended
  void end_line(LineBatch& batch);
  bool next_row_group(LineBatch& batch);  // false when the Parquet file has ended

  std::vector<CorpusFile> files_;
  std::vector<std::optional<ParquetStringColumn>> parquet_;  // by file, for Parquet files
  size_t row_group_ = 0;                                     // the next of the open Parquet file
  int64_t rows_before_ = 0;                                  // its rows in earlier row groups
  size_t batch_bytes_;
  TextDocuments text_documents_;
  bool whole_file_ = false;  // the open file is one document
  size_t file_index_ = 0;
  std::unique_ptr<ByteStream> stream_;  // of files_[file_index_], once opened
  std::vector<char> chunk_;
  size_t chunk_pos_ = 0, chunk_end_ = 0;
  bool file_start_ = true;  // nothing of the file read yet (a byte-order mark may come)
  int64_t line_number_ = 1;
  int64_t sequence_ = 0;
  uint64_t bytes_before_ = 0;  // sizes of the files already read
};

class DocumentParser {
 public:
  explicit DocumentParser(std::string field);
  ~DocumentParser();

  // The document on `line` into `text` (a view into `line` or into this parser, valid until the
  // next call), or false with the reason in `problem`: "invalid JSON (…)", "not a JSON object
  // (an array)", "no field \"text\"", "field \"text\" is a number, not a string".
  bool parse(std::string_view line, CorpusFormat format, std::string_view& text,
             std::string& problem);

 private:
  std::string field_;
  std::unique_ptr<JsonDocument> json_;  // one parser's buffers, reused line after line
};

}  // namespace titan::data
