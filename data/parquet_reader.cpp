#include "data/parquet_reader.h"

#include <fcntl.h>
#include <snappy.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "core/file_io.h"  // defines: pread_all
#include "data/thrift_compact.h"

namespace titan::data {

namespace {

using thrift::CompactReader;

// parquet.thrift's enums, the values this reader names.
enum PhysicalType : int32_t { BOOLEAN = 0, INT32, INT64, INT96, FLOAT, DOUBLE, BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY };
enum Repetition : int32_t { REQUIRED = 0, OPTIONAL = 1, REPEATED = 2 };
enum Codec : int32_t { UNCOMPRESSED = 0, SNAPPY = 1, GZIP = 2, ZSTD = 6 };
enum EncodingKind : int32_t {
  PLAIN = 0,
  PLAIN_DICTIONARY = 2,
  RLE = 3,
  BIT_PACKED = 4,
  RLE_DICTIONARY = 8,
};
enum PageType : int32_t { DATA_PAGE = 0, INDEX_PAGE = 1, DICTIONARY_PAGE = 2, DATA_PAGE_V2 = 3 };
constexpr int32_t kConvertedUtf8 = 0, kConvertedDecimal = 5;

constexpr std::string_view kEncryptedMagic = "PARE";
constexpr const char* kCodecsRead = "UNCOMPRESSED, SNAPPY, GZIP and ZSTD";

const char* physical_type_name(int32_t type) {
  static const char* const kNames[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                       "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return type >= 0 && type < 8 ? kNames[type] : "an unknown type";
}

bool codec_read(int32_t codec) {
  return codec == UNCOMPRESSED || codec == SNAPPY || codec == GZIP || codec == ZSTD;
}

bool value_encoding_read(int32_t encoding) {
  return encoding == PLAIN || encoding == PLAIN_DICTIONARY || encoding == RLE_DICTIONARY;
}

// In a chunk's list of encodings, levels' encodings are listed too: RLE, and BIT_PACKED, which
// old writers list for levels a flat column does not have.
bool listed_encoding_read(int32_t encoding) {
  return value_encoding_read(encoding) || encoding == RLE || encoding == BIT_PACKED;
}

}  // namespace

std::string parquet_codec_name(int32_t codec) {
  static const char* const kNames[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                       "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
  if (codec >= 0 && codec < 8) return kNames[codec];
  return "codec " + std::to_string(codec);
}

std::string parquet_encoding_name(int32_t encoding) {
  static const char* const kNames[] = {"PLAIN",
                                       "GROUP_VAR_INT",
                                       "PLAIN_DICTIONARY",
                                       "RLE",
                                       "BIT_PACKED",
                                       "DELTA_BINARY_PACKED",
                                       "DELTA_LENGTH_BYTE_ARRAY",
                                       "DELTA_BYTE_ARRAY",
                                       "RLE_DICTIONARY",
                                       "BYTE_STREAM_SPLIT"};
  if (encoding >= 0 && encoding < 10) return kNames[encoding];
  return "encoding " + std::to_string(encoding);
}

bool has_parquet_magic(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char head[4];
  const bool read = pread_all(fd, head, sizeof(head), 0);
  ::close(fd);
  return read && std::string_view(head, sizeof(head)) == kParquetMagic;
}

// --- The footer -----------------------------------------------------------------------------

struct ParquetFile::Metadata {
  struct SchemaNode {
    std::string name;
    int32_t type = -1;  // -1: a group
    int32_t repetition = REQUIRED;
    int32_t num_children = 0;
    int32_t converted_type = -1;
    bool string_logical = false;  // LogicalType STRING (or ENUM, JSON)
  };
  struct ColumnChunkMeta {
    bool has_meta = false;
    std::string file_path;
    int32_t type = -1;
    std::vector<int32_t> encodings;
    std::vector<std::string> path;
    int32_t codec = 0;
    int64_t num_values = 0;
    int64_t total_compressed_size = 0;
    int64_t data_page_offset = -1;
    std::optional<int64_t> dictionary_page_offset;
  };
  struct RowGroupMeta {
    int64_t rows = 0;
    std::vector<ColumnChunkMeta> columns;
  };
  struct TopField {
    size_t schema_index = 0;
    int leaf = -1;      // its column chunk's index in a row group; -1 for a group
    int32_t leaves = 0;  // of a group
  };

  int64_t rows = 0;
  bool encrypted = false;
  std::vector<SchemaNode> schema;
  std::vector<RowGroupMeta> row_groups;
  std::vector<TopField> top;
  int32_t leaves = 0;
};

namespace {

using Metadata = ParquetFile::Metadata;

void read_logical_type(CompactReader& r, Metadata::SchemaNode& node) {
  // A union: the field set names the type (1 STRING, 4 ENUM, 12 JSON are strings of bytes).
  r.read_struct([&](int32_t id, uint8_t field) {
    if (id == 1 || id == 4 || id == 12) node.string_logical = true;
    r.skip(field);
  });
}

Metadata::SchemaNode read_schema_element(CompactReader& r) {
  Metadata::SchemaNode node;
  r.read_struct([&](int32_t id, uint8_t type) {
    switch (id) {
      case 1: node.type = r.read_i32(type); break;
      case 3: node.repetition = r.read_i32(type); break;
      case 4: node.name = std::string(r.read_binary(type)); break;
      case 5: node.num_children = r.read_i32(type); break;
      case 6: node.converted_type = r.read_i32(type); break;
      case 10:
        if (type == thrift::STRUCT) {
          read_logical_type(r, node);
        } else {
          r.skip(type);
        }
        break;
      default: r.skip(type);
    }
  });
  return node;
}

Metadata::ColumnChunkMeta read_column_chunk(CompactReader& r) {
  Metadata::ColumnChunkMeta chunk;
  r.read_struct([&](int32_t id, uint8_t type) {
    if (id == 1) {
      chunk.file_path = std::string(r.read_binary(type));
    } else if (id == 3 && type == thrift::STRUCT) {
      chunk.has_meta = true;
      r.read_struct([&](int32_t mid, uint8_t mtype) {
        switch (mid) {
          case 1: chunk.type = r.read_i32(mtype); break;
          case 2:
            r.read_list(mtype, [&](uint8_t e) { chunk.encodings.push_back(r.read_i32(e)); });
            break;
          case 3:
            r.read_list(mtype,
                        [&](uint8_t e) { chunk.path.emplace_back(r.read_binary(e)); });
            break;
          case 4: chunk.codec = r.read_i32(mtype); break;
          case 5: chunk.num_values = r.read_i64(mtype); break;
          case 7: chunk.total_compressed_size = r.read_i64(mtype); break;
          case 9: chunk.data_page_offset = r.read_i64(mtype); break;
          case 11: chunk.dictionary_page_offset = r.read_i64(mtype); break;
          default: r.skip(mtype);
        }
      });
    } else {
      r.skip(type);
    }
  });
  return chunk;
}

void read_file_metadata(CompactReader& r, Metadata& meta) {
  r.read_struct([&](int32_t id, uint8_t type) {
    switch (id) {
      case 2:
        r.read_list(type, [&](uint8_t e) {
          if (e != thrift::STRUCT) throw ThriftError("a schema element that is not a struct");
          meta.schema.push_back(read_schema_element(r));
        });
        break;
      case 3: meta.rows = r.read_i64(type); break;
      case 4:
        r.read_list(type, [&](uint8_t e) {
          if (e != thrift::STRUCT) throw ThriftError("a row group that is not a struct");
          Metadata::RowGroupMeta group;
          r.read_struct([&](int32_t gid, uint8_t gtype) {
            if (gid == 1) {
              r.read_list(gtype, [&](uint8_t c) {
                if (c != thrift::STRUCT) throw ThriftError("a column chunk that is not a struct");
                group.columns.push_back(read_column_chunk(r));
              });
            } else if (gid == 3) {
              group.rows = r.read_i64(gtype);
            } else {
              r.skip(gtype);
            }
          });
          meta.row_groups.push_back(std::move(group));
        });
        break;
      case 8: meta.encrypted = true; r.skip(type); break;  // encryption_algorithm
      default: r.skip(type);
    }
  });
}

std::string describe_leaf(const Metadata::SchemaNode& node) {
  std::string text;
  const bool is_string = node.type == BYTE_ARRAY &&
                         (node.string_logical || node.converted_type == kConvertedUtf8);
  text = is_string ? "string" : physical_type_name(node.type);
  if (node.repetition == REPEATED) return text + ", repeated (a list)";
  return text + (node.repetition == OPTIONAL ? ", optional" : ", required");
}

}  // namespace

ParquetFile::ParquetFile(std::string path, ParquetLimits limits)
    : path_(std::move(path)), limits_(limits), metadata_(std::make_unique<Metadata>()) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    input_error("cannot open input '", path_, "': ", std::strerror(errno),
                "; check the path and its permissions");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    input_error("cannot read input '", path_, "': ", std::strerror(errno));
  }
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](void* dst, uint64_t bytes, uint64_t offset) {
    if (!pread_all(fd, dst, bytes, offset)) {
      input_error("cannot read input '", path_, "' at byte ", offset, ": ",
                  errno != 0 ? std::strerror(errno) : "the file ended", "; check the file");
    }
  };
  char head[4] = {};
  if (file_bytes_ >= 4) read_at(head, 4, 0);
  if (file_bytes_ < 4 || std::string_view(head, 4) != kParquetMagic) {
    char first[16];
    std::snprintf(first, sizeof(first), "%02x %02x %02x %02x", static_cast<uint8_t>(head[0]),
                  static_cast<uint8_t>(head[1]), static_cast<uint8_t>(head[2]),
                  static_cast<uint8_t>(head[3]));
    input_error("input '", path_, "' is not a Parquet file: it does not begin with PAR1 (",
                file_bytes_ < 4 ? std::to_string(file_bytes_) + " bytes"
                                : std::string("its first bytes are ") + first,
                "); give Parquet files, or name the file as what it is (.jsonl, .txt)");
  }
  if (file_bytes_ < 12) {
    input_error("input '", path_, "' is truncated: ", file_bytes_,
                " bytes, and a Parquet file holds at least 12 (its magic twice and a footer "
                "length); download or write it again");
  }
  char tail[8];
  read_at(tail, 8, file_bytes_ - 8);
  const std::string_view end_magic(tail + 4, 4);
  if (end_magic == kEncryptedMagic) {
    input_error("input '", path_, "' is an encrypted Parquet file (it ends with PARE), which is "
                "not read; decrypt it first (e.g. rewrite it with pyarrow without encryption)");
  }
  if (end_magic != kParquetMagic) {
    input_error("input '", path_, "' is truncated: it does not end with PAR1, so its footer is "
                "missing (", file_bytes_, " bytes; a download cut short looks like this); "
                "download or write it again");
  }
  uint32_t footer_bytes = 0;
  std::memcpy(&footer_bytes, tail, 4);  // little-endian, as x86 and arm64 are
  if (footer_bytes > file_bytes_ - 12) {
    input_error("input '", path_, "' is corrupt: its footer length ", footer_bytes,
                " is more than the file holds (", file_bytes_,
                " bytes); download or write it again");
  }
  footer_offset_ = file_bytes_ - 8 - footer_bytes;
  std::string footer(footer_bytes, '\0');
  read_at(footer.data(), footer_bytes, footer_offset_);

  Metadata& meta = *metadata_;
  try {
    CompactReader reader(footer.data(), footer.size());
    read_file_metadata(reader, meta);
  } catch (const ThriftError& e) {
    input_error("input '", path_, "' has a corrupt footer (", footer_bytes,
                " bytes of Thrift metadata): ", e.what(), "; download or write it again");
  }
  if (meta.encrypted) {
    input_error("input '", path_, "' has encrypted columns, which are not read; decrypt it first");
  }

  // The schema is a tree written depth first: element 0 the root, each group followed by its
  // children. The top-level fields are the root's children; each leaf has a column chunk in
  // every row group, in the same order.
  auto corrupt_schema = [&](const std::string& what) {
    input_error("input '", path_, "' has a corrupt schema: ", what, "; download or write it again");
  };
  if (meta.schema.empty()) corrupt_schema("no root element");
  auto span_end = [&](size_t first, int32_t* leaves) {
    size_t end = first + 1;
    int64_t pending = meta.schema[first].num_children;
    *leaves = meta.schema[first].num_children == 0 ? 1 : 0;
    while (pending > 0) {
      if (end >= meta.schema.size()) corrupt_schema("a group has more children than elements follow it");
      const int32_t children = meta.schema[end].num_children;
      if (children < 0) corrupt_schema("a negative number of children");
      if (children == 0) ++*leaves;
      pending += children - 1;
      ++end;
    }
    return end;
  };
  const int32_t root_children = meta.schema[0].num_children;
  if (root_children < 0) corrupt_schema("a negative number of children");
  size_t at = 1;
  for (int32_t i = 0; i < root_children; ++i) {
    if (at >= meta.schema.size()) corrupt_schema("the root has more children than elements follow it");
    Metadata::TopField field;
    field.schema_index = at;
    int32_t leaves = 0;
    const size_t end = span_end(at, &leaves);
    const Metadata::SchemaNode& node = meta.schema[at];
    ParquetColumnInfo info;
    info.name = node.name;
    if (node.num_children > 0) {
      field.leaves = leaves;
      info.description = "a nested group of " + std::to_string(node.num_children) + " field" +
                         (node.num_children == 1 ? "" : "s");
    } else {
      field.leaf = meta.leaves;
      info.description = describe_leaf(node);
    }
    meta.leaves += leaves;
    meta.top.push_back(field);
    columns_.push_back(std::move(info));
    at = end;
  }
  if (at != meta.schema.size()) corrupt_schema("elements after the root's last child");
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    if (meta.row_groups[g].columns.size() != static_cast<size_t>(meta.leaves)) {
      input_error("input '", path_, "' is corrupt: row group ", g, " has ",
                  meta.row_groups[g].columns.size(), " column chunks and the schema ",
                  meta.leaves, " columns; download or write it again");
    }
  }
}

ParquetFile::~ParquetFile() = default;
ParquetFile::ParquetFile(ParquetFile&&) noexcept = default;
ParquetFile& ParquetFile::operator=(ParquetFile&&) noexcept = default;

int64_t ParquetFile::rows() const { return metadata_->rows; }
size_t ParquetFile::row_groups() const { return metadata_->row_groups.size(); }

std::string ParquetFile::column_names() const {
  std::string names;
  for (const ParquetColumnInfo& column : columns_) {
    names += (names.empty() ? "" : ", ") + column.name + " (" + column.description + ")";
  }
  return names.empty() ? "none" : names;
}

ParquetStringColumn ParquetFile::string_column(const std::string& name,
                                               const std::string& flag) const {
  const Metadata& meta = *metadata_;
  size_t index = columns_.size();
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].name == name) {
      index = i;
      break;
    }
  }
  if (index == columns_.size()) {
    input_error("input '", path_, "' has no column '", name, "' (its columns: ", column_names(),
                "); name its text column with ", flag);
  }
  const Metadata::TopField& field = meta.top[index];
  const Metadata::SchemaNode& node = meta.schema[field.schema_index];
  const std::string column = "column '" + name + "' of input '" + path_ + "'";
  if (field.leaf < 0) {
    input_error(column, " is ", columns_[index].description,
                ", and only a top-level string column is read; name one with ", flag,
                " (its columns: ", column_names(), ")");
  }
  if (node.repetition == REPEATED) {
    input_error(column, " is repeated (a list of values per row), and only a column of one "
                "string per row is read; name one with ", flag, " (its columns: ",
                column_names(), ")");
  }
  if (node.type != BYTE_ARRAY || node.converted_type == kConvertedDecimal) {
    input_error(column, " holds ",
                node.type == BYTE_ARRAY ? "decimals" : physical_type_name(node.type),
                ", not strings (BYTE_ARRAY); name a string column with ", flag,
                " (its columns: ", column_names(), ")");
  }

  ParquetStringColumn result;
  result.path_ = path_;
  result.name_ = name;
  result.max_definition_level_ = node.repetition == OPTIONAL ? 1 : 0;
  result.limits_ = limits_;
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const Metadata::RowGroupMeta& group = meta.row_groups[g];
    const Metadata::ColumnChunkMeta& chunk = group.columns[static_cast<size_t>(field.leaf)];
    const std::string where = "input '" + path_ + "': row group " + std::to_string(g) + " of " +
                              std::to_string(meta.row_groups.size()) + ", column '" + name + "'";
    if (!chunk.file_path.empty()) {
      input_error(where, ": its data is in another file ('", chunk.file_path,
                  "'), which is not read; give a Parquet file that holds its own data");
    }
    if (!chunk.has_meta) {
      input_error(where, ": no column metadata (an encrypted column?); it is not read");
    }
    if (chunk.type != BYTE_ARRAY) {
      input_error(where, ": its chunk holds ", physical_type_name(chunk.type),
                  " where the schema says BYTE_ARRAY; the file is corrupt: write it again");
    }
    if (!codec_read(chunk.codec)) {
      input_error(where, ": compressed with ", parquet_codec_name(chunk.codec),
                  ", which is not read (", kCodecsRead,
                  " are); rewrite the file with one of those (e.g. pyarrow's "
                  "write_table(..., compression='zstd'))");
    }
    for (int32_t encoding : chunk.encodings) {
      if (!listed_encoding_read(encoding)) {
        input_error(where, ": encoded with ", parquet_encoding_name(encoding),
                    ", which is not read (PLAIN, RLE_DICTIONARY and PLAIN_DICTIONARY are); "
                    "rewrite the file with dictionary or plain encoding (pyarrow's defaults)");
      }
    }
    const int64_t begin = chunk.dictionary_page_offset && *chunk.dictionary_page_offset >= 4 &&
                                  *chunk.dictionary_page_offset < chunk.data_page_offset
                              ? *chunk.dictionary_page_offset
                              : chunk.data_page_offset;
    const uint64_t limit = footer_offset_;
    if (begin < 4 || chunk.total_compressed_size <= 0 ||
        static_cast<uint64_t>(begin) > limit ||
        static_cast<uint64_t>(chunk.total_compressed_size) > limit - static_cast<uint64_t>(begin)) {
      input_error(where, ": the chunk's ", chunk.total_compressed_size, " bytes at byte ", begin,
                  " lie outside the file's data (bytes 4 to ", limit,
                  "); the file is truncated or corrupt: download or write it again");
    }
    if (group.rows < 0 || chunk.num_values != group.rows ||
        static_cast<uint64_t>(group.rows) > limits_.max_chunk_values) {
      input_error(where, ": the footer says ", group.rows, " rows and ", chunk.num_values,
                  " values (a flat column has one value a row, at most ",
                  limits_.max_chunk_values, "); the file is corrupt: write it again");
    }
    ParquetChunk info;
    info.rows = group.rows;
    info.values = chunk.num_values;
    info.offset = static_cast<uint64_t>(begin);
    info.bytes = static_cast<uint64_t>(chunk.total_compressed_size);
    info.codec = chunk.codec;
    result.chunks_.push_back(info);
  }
  return result;
}

// --- Pages ----------------------------------------------------------------------------------

std::string ParquetStringColumn::read_chunk(size_t row_group) const {
  const ParquetChunk& info = chunks_.at(row_group);
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    input_error("cannot open input '", path_, "': ", std::strerror(errno),
                "; check the path and its permissions");
  }
  std::string bytes(info.bytes, '\0');
  errno = 0;
  const bool read = pread_all(fd, bytes.data(), info.bytes, info.offset);
  const int error = errno;
  ::close(fd);
  if (!read) {
    input_error("cannot read input '", path_, "': row group ", row_group, " of ", chunks_.size(),
                ", column '", name_, "' at byte ", info.offset, ": ",
                error != 0 ? std::strerror(error) : "the file ended (it became shorter)",
                "; check the file");
  }
  return bytes;
}

namespace {

// A page's content is not what its header promised; the caller adds the file and the place.
class PageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void page_error(const std::string& what) { throw PageError(what); }

struct PageHeader {
  int32_t type = -1;
  int32_t uncompressed_size = -1;
  int32_t compressed_size = -1;
  std::optional<int32_t> crc;
  bool has_data_header = false, has_dictionary_header = false, has_v2_header = false;
  // DataPageHeader (v1) / DataPageHeaderV2
  int32_t num_values = 0;
  int32_t encoding = PLAIN;
  int32_t definition_level_encoding = RLE;
  int32_t num_nulls = 0;
  int32_t definition_levels_bytes = 0;
  int32_t repetition_levels_bytes = 0;
  bool is_compressed = true;
  // DictionaryPageHeader
  int32_t dictionary_values = 0;
  int32_t dictionary_encoding = PLAIN;
};

PageHeader read_page_header(CompactReader& r) {
  PageHeader h;
  r.read_struct([&](int32_t id, uint8_t type) {
    switch (id) {
      case 1: h.type = r.read_i32(type); break;
      case 2: h.uncompressed_size = r.read_i32(type); break;
      case 3: h.compressed_size = r.read_i32(type); break;
      case 4: h.crc = r.read_i32(type); break;
      case 5:
        h.has_data_header = true;
        r.read_struct([&](int32_t f, uint8_t t) {
          switch (f) {
            case 1: h.num_values = r.read_i32(t); break;
            case 2: h.encoding = r.read_i32(t); break;
            case 3: h.definition_level_encoding = r.read_i32(t); break;
            default: r.skip(t);
          }
        });
        break;
      case 7:
        h.has_dictionary_header = true;
        r.read_struct([&](int32_t f, uint8_t t) {
          switch (f) {
            case 1: h.dictionary_values = r.read_i32(t); break;
            case 2: h.dictionary_encoding = r.read_i32(t); break;
            default: r.skip(t);
          }
        });
        break;
      case 8:
        h.has_v2_header = true;
        r.read_struct([&](int32_t f, uint8_t t) {
          switch (f) {
            case 1: h.num_values = r.read_i32(t); break;
            case 2: h.num_nulls = r.read_i32(t); break;
            case 4: h.encoding = r.read_i32(t); break;
            case 5: h.definition_levels_bytes = r.read_i32(t); break;
            case 6: h.repetition_levels_bytes = r.read_i32(t); break;
            case 7: h.is_compressed = r.read_bool(t); break;
            default: r.skip(t);
          }
        });
        break;
      default: r.skip(type);
    }
  });
  return h;
}

// `src` decompressed into exactly `size` bytes at `dst`.
void decompress(int32_t codec, std::string_view src, char* dst, size_t size) {
  switch (codec) {
    case SNAPPY: {
      size_t length = 0;
      if (!snappy::GetUncompressedLength(src.data(), src.size(), &length)) {
        page_error("its snappy data is corrupt (no length)");
      }
      if (length != size) {
        page_error("its snappy data holds " + std::to_string(length) + " bytes, its header says " +
                   std::to_string(size));
      }
      if (!snappy::RawUncompress(src.data(), src.size(), dst)) {
        page_error("its snappy data is corrupt");
      }
      return;
    }
    case GZIP: {
      z_stream z{};
      // 32 + MAX_WBITS: a gzip stream, as the format says, or a zlib one, as some writers give.
      if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) page_error("zlib could not start (out of memory)");
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(src.data()));
      z.avail_in = static_cast<uInt>(src.size());
      z.next_out = reinterpret_cast<Bytef*>(dst);
      z.avail_out = static_cast<uInt>(size);
      const int status = inflate(&z, Z_FINISH);
      const uLong produced = z.total_out;
      const std::string message = z.msg != nullptr ? z.msg : zError(status);
      inflateEnd(&z);
      if (status == Z_STREAM_END && produced == size) return;
      if (status == Z_STREAM_END || status == Z_BUF_ERROR) {
        page_error("its gzip data gives " + std::string(status == Z_STREAM_END ? "" : "more than ") +
                   std::to_string(produced) + " bytes, its header says " + std::to_string(size) +
                   (status == Z_BUF_ERROR && z.avail_out > 0 ? " (the gzip stream is cut short)" : ""));
      }
      page_error("its gzip data is corrupt (zlib: " + message + ")");
    }
    case ZSTD: {
      const size_t produced = ZSTD_decompress(dst, size, src.data(), src.size());
      if (ZSTD_isError(produced)) {
        page_error(std::string("its zstd data is corrupt (zstd: ") + ZSTD_getErrorName(produced) + ")");
      }
      if (produced != size) {
        page_error("its zstd data gives " + std::to_string(produced) + " bytes, its header says " +
                   std::to_string(size));
      }
      return;
    }
    default: page_error("compressed with " + parquet_codec_name(codec) + ", which is not read");
  }
}

// The RLE / bit-packed hybrid of Parquet's levels and dictionary indices.
class HybridDecoder {
 public:
  HybridDecoder(std::string_view data, int bit_width) : data_(data), bit_width_(bit_width) {}

  // Up to `n` values into `out`; fewer only when the data ends.
  size_t next(uint32_t* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (run_left_ == 0 && !next_run()) break;
      const size_t take = std::min<size_t>(n - done, run_left_);
      if (repeated_) {
        std::fill(out + done, out + done + take, repeated_value_);
      } else {
        for (size_t i = 0; i < take; ++i) out[done + i] = packed_value(packed_index_ + i);
        packed_index_ += take;
      }
      run_left_ -= take;
      done += take;
    }
    return done;
  }

 private:
  bool next_run() {
    if (pos_ >= data_.size()) return false;
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ >= data_.size() || shift > 35) page_error("a run header of its levels or indices is cut short");
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      header |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) break;
    }
    if (header & 1) {
      // (header >> 1) groups of 8 values, bit_width bytes each; a last group cut short by the
      // end of the data holds the values whose bits are there.
      const uint64_t groups = header >> 1;
      const uint64_t bytes = groups * static_cast<uint64_t>(bit_width_);
      const uint64_t available = std::min<uint64_t>(bytes, data_.size() - pos_);
      packed_ = data_.substr(pos_, available);
      pos_ += available;
      repeated_ = false;
      packed_index_ = 0;
      run_left_ = bit_width_ == 0 ? groups * 8 : available * 8 / static_cast<uint64_t>(bit_width_);
    } else {
      const size_t bytes = (static_cast<size_t>(bit_width_) + 7) / 8;
      if (data_.size() - pos_ < bytes) page_error("a run of its levels or indices is cut short");
      uint32_t value = 0;
      for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
      pos_ += bytes;
      if (bit_width_ < 32 && (value >> bit_width_) != 0) {
        page_error("a run's value " + std::to_string(value) + " is wider than " +
                   std::to_string(bit_width_) + " bits");
      }
      repeated_ = true;
      repeated_value_ = value;
      run_left_ = header >> 1;
    }
    if (run_left_ == 0) return next_run();
    return true;
  }

  uint32_t packed_value(uint64_t index) const {
    if (bit_width_ == 0) return 0;
    const uint64_t bit = index * static_cast<uint64_t>(bit_width_);
    const size_t byte = static_cast<size_t>(bit / 8);
    uint64_t window = 0;
    const size_t have = std::min<size_t>(8, packed_.size() - byte);
    std::memcpy(&window, packed_.data() + byte, have);
    window >>= bit % 8;
    return static_cast<uint32_t>(window & ((uint64_t{1} << bit_width_) - 1));
  }

  std::string_view data_;
  size_t pos_ = 0;
  int bit_width_;
  uint64_t run_left_ = 0;
  bool repeated_ = true;
  uint32_t repeated_value_ = 0;
  std::string_view packed_;
  uint64_t packed_index_ = 0;
};

uint32_t load_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Decodes one column chunk's pages into ParquetStrings.
class ChunkDecoder {
 public:
  ChunkDecoder(int max_definition_level, int32_t codec, const ParquetLimits& limits,
               ParquetStrings& out)
      : optional_(max_definition_level > 0), codec_(codec), limits_(limits), out_(out) {}

  // One page: its header and its bytes (compressed, as in the file).
  void page(const PageHeader& h, std::string_view body) {
    if (h.type == INDEX_PAGE) return;
    if (h.uncompressed_size < 0 || static_cast<uint64_t>(h.uncompressed_size) > limits_.max_page_bytes) {
      page_error("it says it holds " + std::to_string(h.uncompressed_size) +
                 " bytes decompressed (at most " + std::to_string(limits_.max_page_bytes) + " are read)");
    }
    if (h.type == DICTIONARY_PAGE) return dictionary_page(h, body);
    if (h.type == DATA_PAGE) return data_page_v1(h, body);
    if (h.type == DATA_PAGE_V2) return data_page_v2(h, body);
    page_error("its type " + std::to_string(h.type) + " is no Parquet page type");
  }

  int64_t values() const { return values_; }

 private:
  std::string_view inflate(std::string_view body, size_t size, std::string& buffer) {
    if (codec_ == UNCOMPRESSED) {
      if (body.size() != size) {
        page_error("it is uncompressed and holds " + std::to_string(body.size()) +
                   " bytes, its header says " + std::to_string(size));
      }
      return body;
    }
    buffer.resize(size);
    decompress(codec_, body, buffer.data(), size);
    return buffer;
  }

  void dictionary_page(const PageHeader& h, std::string_view body) {
    if (!h.has_dictionary_header) page_error("a dictionary page without its header");
    if (have_dictionary_ || values_ > 0) page_error("a second dictionary page, or one after data pages");
    if (h.dictionary_encoding != PLAIN && h.dictionary_encoding != PLAIN_DICTIONARY) {
      page_error("a dictionary encoded with " + parquet_encoding_name(h.dictionary_encoding) +
                 " (PLAIN is read)");
    }
    const std::string_view bytes =
        inflate(body, static_cast<size_t>(h.uncompressed_size), dictionary_bytes_);
    if (bytes.data() != dictionary_bytes_.data()) dictionary_bytes_.assign(bytes);
    const std::string_view stored = dictionary_bytes_;
    if (h.dictionary_values < 0 || static_cast<uint64_t>(h.dictionary_values) > stored.size() / 4) {
      page_error("a dictionary of " + std::to_string(h.dictionary_values) + " values in " +
                 std::to_string(stored.size()) + " bytes");
    }
    dictionary_.clear();
    dictionary_.reserve(static_cast<size_t>(h.dictionary_values));
    size_t pos = 0;
    for (int32_t i = 0; i < h.dictionary_values; ++i) {
      dictionary_.push_back(plain_value(stored, pos));
    }
    have_dictionary_ = true;
    ++out_.dictionary_pages;
  }

  void data_page_v1(const PageHeader& h, std::string_view body) {
    if (!h.has_data_header) page_error("a data page without its header");
    const std::string_view bytes = inflate(body, static_cast<size_t>(h.uncompressed_size), page_bytes_);
    std::string_view levels, values = bytes;
    if (optional_) {
      if (h.definition_level_encoding != RLE) {
        page_error("definition levels encoded with " +
                   parquet_encoding_name(h.definition_level_encoding) + " (RLE is read)");
      }
      if (bytes.size() < 4) page_error("its definition levels are cut short");
      const uint32_t length = load_u32(bytes.data());
      if (length > bytes.size() - 4) {
        page_error("its definition levels' " + std::to_string(length) + " bytes run past its " +
                   std::to_string(bytes.size()));
      }
      levels = bytes.substr(4, length);
      values = bytes.substr(4 + length);
    }
    decode_values(h.num_values, -1, h.encoding, levels, values);
  }

  void data_page_v2(const PageHeader& h, std::string_view body) {
    if (!h.has_v2_header) page_error("a data page v2 without its header");
    if (h.repetition_levels_bytes != 0) {
      page_error("repetition levels in a flat column (" + std::to_string(h.repetition_levels_bytes) + " bytes)");
    }
    if (h.definition_levels_bytes < 0 || static_cast<size_t>(h.definition_levels_bytes) > body.size() ||
        h.definition_levels_bytes > h.uncompressed_size) {
      page_error("its definition levels' " + std::to_string(h.definition_levels_bytes) +
                 " bytes run past the page");
    }
    if (!optional_ && h.definition_levels_bytes != 0) {
      page_error("definition levels in a required column");
    }
    const size_t level_bytes = static_cast<size_t>(h.definition_levels_bytes);
    const std::string_view levels = body.substr(0, level_bytes);
    const std::string_view stored = body.substr(level_bytes);
    const size_t size = static_cast<size_t>(h.uncompressed_size) - level_bytes;
    std::string_view values;
    if (h.is_compressed && codec_ != UNCOMPRESSED) {
      page_bytes_.resize(size);
      decompress(codec_, stored, page_bytes_.data(), size);
      values = page_bytes_;
    } else {
      if (stored.size() != size) {
        page_error("its values are stored uncompressed in " + std::to_string(stored.size()) +
                   " bytes, its header says " + std::to_string(size));
      }
      values = stored;
    }
    if (h.num_nulls < 0) page_error("a negative count of nulls");
    decode_values(h.num_values, h.num_nulls, h.encoding, levels, values);
  }

  std::string_view plain_value(std::string_view bytes, size_t& pos) {
    if (bytes.size() - pos < 4) page_error("a PLAIN value's length is cut short");
    const uint32_t length = load_u32(bytes.data() + pos);
    pos += 4;
    if (length > bytes.size() - pos) {
      page_error("a PLAIN value of " + std::to_string(length) + " bytes runs past the page (" +
                 std::to_string(bytes.size() - pos) + " left)");
    }
    const std::string_view value = bytes.substr(pos, length);
    pos += length;
    return value;
  }

  void append(std::string_view value) {
    if (out_.text.size() + value.size() > limits_.max_chunk_text_bytes) {
      page_error("its strings pass " + std::to_string(limits_.max_chunk_text_bytes) +
                 " bytes in one column chunk");
    }
    out_.text.append(value);
    out_.ends.push_back(out_.text.size());
  }

  // `count` values of the page (nulls included), the defined ones encoded with `encoding`.
  void decode_values(int32_t count, int32_t nulls_said, int32_t encoding, std::string_view levels,
                     std::string_view values) {
    if (count < 0 || static_cast<uint64_t>(values_) + static_cast<uint64_t>(count) > limits_.max_chunk_values) {
      page_error("it says it holds " + std::to_string(count) + " values");
    }
    const bool dictionary = encoding == RLE_DICTIONARY || encoding == PLAIN_DICTIONARY;
    if (!dictionary && encoding != PLAIN) {
      page_error("its values are encoded with " + parquet_encoding_name(encoding) +
                 ", which is not read (PLAIN, RLE_DICTIONARY and PLAIN_DICTIONARY are)");
    }
    // How many of the page's values are defined: every one, or the levels' 1s.
    std::optional<HybridDecoder> level_decoder;
    if (optional_) level_decoder.emplace(levels, 1);
    std::optional<HybridDecoder> index_decoder;
    if (dictionary) {
      if (!have_dictionary_) page_error("dictionary-encoded values and no dictionary page before them");
      if (values.empty()) {
        // A page of nulls only may hold no bit width at all.
        index_decoder.emplace(values, 0);
      } else {
        const int width = static_cast<uint8_t>(values[0]);
        if (width > 32) page_error("a dictionary index width of " + std::to_string(width) + " bits");
        index_decoder.emplace(values.substr(1), width);
      }
    }
    size_t plain_pos = 0;
    int64_t page_nulls = 0;
    constexpr size_t kBlock = 1024;
    uint32_t defined[kBlock], indices[kBlock];
    for (int64_t left = count; left > 0;) {
      const size_t block = static_cast<size_t>(std::min<int64_t>(left, kBlock));
      size_t present = block;
      if (level_decoder) {
        if (level_decoder->next(defined, block) != block) {
          page_error("its definition levels end before its " + std::to_string(count) + " values");
        }
        present = 0;
        for (size_t i = 0; i < block; ++i) present += defined[i];
      }
      page_nulls += static_cast<int64_t>(block - present);
      if (dictionary) {
        if (index_decoder->next(indices, present) != present) {
          page_error("its dictionary indices end before its values do");
        }
        for (size_t i = 0; i < present; ++i) {
          if (indices[i] >= dictionary_.size()) {
            page_error("a dictionary index " + std::to_string(indices[i]) + " past the dictionary's " +
                       std::to_string(dictionary_.size()) + " values");
          }
          append(dictionary_[indices[i]]);
        }
      } else {
        for (size_t i = 0; i < present; ++i) append(plain_value(values, plain_pos));
      }
      left -= static_cast<int64_t>(block);
    }
    if (nulls_said >= 0 && nulls_said != page_nulls) {
      page_error("its header says " + std::to_string(nulls_said) + " nulls and its levels give " +
                 std::to_string(page_nulls));
    }
    out_.nulls += page_nulls;
    values_ += count;
    ++out_.data_pages;
  }

  bool optional_;
  int32_t codec_;
  const ParquetLimits& limits_;
  ParquetStrings& out_;
  int64_t values_ = 0;
  bool have_dictionary_ = false;
  std::string dictionary_bytes_;
  std::vector<std::string_view> dictionary_;
  std::string page_bytes_;
};

}  // namespace

void ParquetStringColumn::decode_chunk(size_t row_group, std::string_view bytes,
                                       ParquetStrings& out) const {
  const ParquetChunk& info = chunks_.at(row_group);
  out = ParquetStrings{};
  out.ends.reserve(static_cast<size_t>(std::min<int64_t>(info.values, bytes.size() / 4 + 1)));
  ChunkDecoder decoder(max_definition_level_, info.codec, limits_, out);
  size_t pos = 0;
  int pages = 0;
  auto where = [&] {
    return "input '" + path_ + "': row group " + std::to_string(row_group) + " of " +
           std::to_string(chunks_.size()) + ", column '" + name_ + "', page " +
           std::to_string(pages) + " (at byte " + std::to_string(info.offset + pos) + ")";
  };
  try {
    while (decoder.values() < info.values) {
      if (pos >= bytes.size()) {
        input_error(where(), ": the column chunk ends after ", decoder.values(), " of its ",
                    info.values, " values; the file is truncated or corrupt: download or write "
                    "it again");
      }
      PageHeader header;
      CompactReader reader(bytes.data() + pos, bytes.size() - pos);
      try {
        header = read_page_header(reader);
      } catch (const ThriftError& e) {
        input_error(where(), ": its header is corrupt (", e.what(),
                    "); the file is damaged: download or write it again");
      }
      const size_t body_at = pos + reader.position();
      if (header.compressed_size < 0 ||
          static_cast<size_t>(header.compressed_size) > bytes.size() - body_at) {
        input_error(where(), ": its ", header.compressed_size, " bytes run past the column "
                    "chunk's end (", bytes.size() - body_at, " left); the file is truncated or "
                    "corrupt: download or write it again");
      }
      const std::string_view body = bytes.substr(body_at, static_cast<size_t>(header.compressed_size));
      if (header.crc) {
        const uint32_t computed = static_cast<uint32_t>(
            crc32_z(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
        if (computed != static_cast<uint32_t>(*header.crc)) {
          char said[16], got[16];
          std::snprintf(said, sizeof(said), "%08x", static_cast<uint32_t>(*header.crc));
          std::snprintf(got, sizeof(got), "%08x", computed);
          input_error(where(), ": CRC mismatch (the header says ", said, ", its ",
                      body.size(), " bytes give ", got,
                      "); the file is damaged: download or write it again");
        }
      }
      try {
        decoder.page(header, body);
      } catch (const PageError& e) {
        input_error(where(), ": the page is corrupt: ", e.what(),
                    "; the file is damaged: download or write it again");
      }
      pos = body_at + body.size();
      ++pages;
    }
  } catch (const PageError& e) {
    input_error(where(), ": ", e.what());
  }
  if (decoder.values() != info.values) {
    input_error(where(), ": its pages hold ", decoder.values(), " values and the footer says ",
                info.values, "; the file is corrupt: write it again");
  }
}

}  // namespace titan::data
