// Parquet files as corpora publish them (FineWeb, FineWeb-Edu, DCLM, nanochat's shards): one
// string column read by name, row group by row group, with memory bounded by one column chunk.
//
// The subset read (docs/data.md#parquet): the footer and page headers (Thrift's compact
// protocol, data/thrift_compact.h); a top-level BYTE_ARRAY column, REQUIRED or OPTIONAL (its
// definition levels, RLE/bit-packed hybrid; nulls skipped and counted); PLAIN values and
// dictionary pages with RLE_DICTIONARY or PLAIN_DICTIONARY indices, both in one chunk (a writer
// that falls back to PLAIN when its dictionary grows); data pages v1 and v2; UNCOMPRESSED,
// SNAPPY, GZIP and ZSTD; the page CRC-32 when a header carries one. Anything else — a nested
// or repeated column, another type, codec or encoding, an encrypted file, a chunk in another
// file — is an InputError that names the file, the row group and the column where it applies,
// and what the file has instead.
//
// Work is split as titan_tokenize needs it: ParquetFile reads and checks the footer (one read
// at the end of the file); ParquetStringColumn::read_chunk reads a row group's column chunk as
// it lies in the file (one pread, the only I/O), and decode_chunk turns those bytes into
// strings on any thread (decompression, CRCs, levels, dictionary): row groups are the unit of
// work of a pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

// Every Parquet file begins and ends with these four bytes.
inline constexpr std::string_view kParquetMagic = "PAR1";

// Whether `path` begins with PAR1: four bytes read, nothing checked further (false for a file
// that cannot be opened or is shorter): how a caller tells a Parquet file from others.
bool has_parquet_magic(const std::string& path);

// Caps on what a file's own numbers may make the reader allocate. The defaults are far above
// any corpus (a FineWeb row group is a few MB); a fuzzer passes small ones.
struct ParquetLimits {
  uint64_t max_page_bytes = uint64_t{1} << 31;        // one page, decompressed (an i32 can say 2 GiB)
  uint64_t max_chunk_text_bytes = uint64_t{1} << 34;  // one column chunk's strings, 16 GiB
  uint64_t max_chunk_values = uint64_t{1} << 31;      // one column chunk's rows
};

// A top-level field of the file's schema: "text: string, optional", "id: INT64, required",
// "tags: a nested group of 2 fields".
struct ParquetColumnInfo {
  std::string name;
  std::string description;
};

// Where one row group's chunk of the column lies.
struct ParquetChunk {
  int64_t rows = 0;
  int64_t values = 0;     // ColumnMetaData.num_values: rows, nulls included, for a flat column
  uint64_t offset = 0;    // of its first page (the dictionary page when there is one)
  uint64_t bytes = 0;     // every page, headers included
  int32_t codec = 0;      // Parquet's CompressionCodec
};

// One column chunk's strings back to back: value i is text[ends[i-1], ends[i]) (ends[-1] = 0),
// in row order, nulls left out (and counted).
struct ParquetStrings {
  std::string text;
  std::vector<size_t> ends;
  int64_t nulls = 0;
  int64_t data_pages = 0;        // v1 and v2
  int64_t dictionary_pages = 0;  // 0 or 1

  size_t size() const { return ends.size(); }
  std::string_view operator[](size_t i) const {
    const size_t begin = i == 0 ? 0 : ends[i - 1];
    return std::string_view(text).substr(begin, ends[i] - begin);
  }
};

class ParquetStringColumn;

class ParquetFile {
 public:
  // Reads and checks the magic bytes and the footer. InputError naming `path`: not Parquet,
  // truncated, a corrupt or encrypted footer, a schema that does not parse.
  explicit ParquetFile(std::string path, ParquetLimits limits = {});
  ~ParquetFile();
  ParquetFile(ParquetFile&&) noexcept;
  ParquetFile& operator=(ParquetFile&&) noexcept;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return file_bytes_; }
  int64_t rows() const;
  size_t row_groups() const;
  // The schema's top-level fields, in order.
  const std::vector<ParquetColumnInfo>& columns() const { return columns_; }
  // "text, id, url": for messages.
  std::string column_names() const;

  // The string column `name`, every row group's chunk checked: InputError for a column the
  // file lacks (naming those it has), a column that is not a string or is nested or repeated,
  // a codec or a value encoding outside the subset (named), a chunk outside the file. `flag`
  // names the caller's option in those messages ("--field").
  ParquetStringColumn string_column(const std::string& name, const std::string& flag) const;

  struct Metadata;  // the footer as read (parquet_reader.cpp)

 private:
  std::string path_;
  uint64_t file_bytes_ = 0;
  uint64_t footer_offset_ = 0;  // where the footer begins: every chunk ends before it
  ParquetLimits limits_;
  std::vector<ParquetColumnInfo> columns_;
  std::unique_ptr<Metadata> metadata_;
};

// A checked string column: a value, cheap to copy, safe to use from many threads at once.
class ParquetStringColumn {
 public:
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  bool optional() const { return max_definition_level_ > 0; }
  size_t row_groups() const { return chunks_.size(); }
  const ParquetChunk& chunk(size_t row_group) const { return chunks_.at(row_group); }

  // The chunk's bytes as they lie in the file. InputError when the file cannot be read or has
  // become shorter.
  std::string read_chunk(size_t row_group) const;
  // Decodes `bytes` (read_chunk's) into `out` (cleared first). InputError naming the file, the
  // row group and the column: a corrupt page, a CRC mismatch, an encoding or a page kind
  // outside the subset, counts that disagree with the footer.
  void decode_chunk(size_t row_group, std::string_view bytes, ParquetStrings& out) const;
  // Both.
  void read_strings(size_t row_group, ParquetStrings& out) const {
    decode_chunk(row_group, read_chunk(row_group), out);
  }

 private:
  friend class ParquetFile;
  std::string path_;
  std::string name_;
  int max_definition_level_ = 0;  // 0 required, 1 optional
  ParquetLimits limits_;
  std::vector<ParquetChunk> chunks_;
};

// "SNAPPY", "LZ4_RAW", "codec 42": Parquet's names.
std::string parquet_codec_name(int32_t codec);
std::string parquet_encoding_name(int32_t encoding);

}  // namespace titan::data
