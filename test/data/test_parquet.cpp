// data/parquet_reader.h and data/thrift_compact.h. The compact protocol and the files that are
// not Parquet are checked on bytes written here; every Parquet file is written by the
// independent writers of test/support/parquet_reference.h (Arrow's Rust writer, hyparquet-writer)
// from documents given as JSON lines, and read back value for value: every codec read × plain
// and dictionary × data page v1 and v2 × required and optional with nulls, several row groups
// and several pages each, page CRCs, and every hostile case with the one line that names it.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/parquet_reader.h"
#include "data/thrift_compact.h"
#include "support/parquet_reference.h"
#include "support/process.h"

namespace {

namespace fs = std::filesystem;
using titan::InputError;
using titan::data::ParquetFile;
using titan::data::ParquetStrings;
using titan::testing::ParquetSpec;

std::string parquet_dir(const std::string& name) {
  const std::string dir = titan::testing::scratch_dir("parquet") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// The InputError's message of `read`, "" when it does not throw one.
template <class Read>
std::string refusal(Read&& read) {
  try {
    read();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void check_refused(const std::string& message, const std::vector<std::string>& fragments) {
  CAPTURE(message);
  REQUIRE(!message.empty());
  CHECK(message.find('\n') == std::string::npos);
  for (const std::string& fragment : fragments) {
    CHECK_MESSAGE(message.find(fragment) != std::string::npos, fragment);
  }
}

// Every value of the column, row group after row group, nulls counted.
struct ColumnRead {
  std::vector<std::string> values;
  int64_t nulls = 0;
  int64_t data_pages = 0;
  int64_t dictionary_pages = 0;
  size_t row_groups = 0;
};

ColumnRead read_column(const std::string& path, const std::string& name) {
  ParquetFile file(path);
  const titan::data::ParquetStringColumn column = file.string_column(name, "--field");
  ColumnRead read;
  read.row_groups = column.row_groups();
  ParquetStrings strings;
  for (size_t g = 0; g < column.row_groups(); ++g) {
    column.read_strings(g, strings);
    for (size_t i = 0; i < strings.size(); ++i) read.values.emplace_back(strings[i]);
    read.nulls += strings.nulls;
    read.data_pages += strings.data_pages;
    read.dictionary_pages += strings.dictionary_pages;
  }
  return read;
}

std::vector<std::string> present(const std::vector<std::optional<std::string>>& documents) {
  std::vector<std::string> values;
  for (const auto& document : documents) {
    if (document) values.push_back(*document);
  }
  return values;
}

int64_t nulls_in(const std::vector<std::optional<std::string>>& documents) {
  int64_t nulls = 0;
  for (const auto& document : documents) nulls += document ? 0 : 1;
  return nulls;
}

std::string compact_struct_bytes() {
  // field 1 i32 -3; field 3 binary "ab"; field 20 (long form) a list of 2 i64; field 21 true;
  // field 22 a struct {1: i32 7}; STOP.
  return std::string("\x15\x05", 2) + "\x28\x02" "ab" + std::string("\x09\x28\x26\x04\x02", 5) +
         "\x11" + std::string("\x1C\x15\x0E\x00", 4) + std::string(1, '\0');
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("thrift compact protocol: fields and long field ids and lists and booleans and nested structs") {
    const std::string bytes = compact_struct_bytes();
    titan::data::thrift::CompactReader reader(bytes.data(), bytes.size());
    int32_t a = 0, nested = 0;
    std::string b;
    std::vector<int64_t> list;
    bool flag = false;
    reader.read_struct([&](int32_t id, uint8_t type) {
      switch (id) {
        case 1: a = reader.read_i32(type); break;
        case 3: b = std::string(reader.read_binary(type)); break;
        case 20: reader.read_list(type, [&](uint8_t e) { list.push_back(reader.read_i64(e)); }); break;
        case 21: flag = reader.read_bool(type); break;
        case 22:
          reader.read_struct([&](int32_t, uint8_t t) { nested = reader.read_i32(t); });
          break;
        default: FAIL("field ", id);
      }
    });
    CHECK(a == -3);
    CHECK(b == "ab");
    CHECK(list == std::vector<int64_t>{2, 1});
    CHECK(flag);
    CHECK(nested == 7);
    CHECK(reader.position() == bytes.size());

    // Skipped whole, unknown fields and all.
    titan::data::thrift::CompactReader skipper(bytes.data(), bytes.size());
    skipper.skip(titan::data::thrift::STRUCT);
    CHECK(skipper.position() == bytes.size());
  }

  TEST_CASE("thrift compact protocol: lengths past the end and deep nesting and long varints throw") {
    auto fails = [](const std::string& bytes, const std::string& fragment) {
      CAPTURE(fragment);
      titan::data::thrift::CompactReader reader(bytes.data(), bytes.size());
      try {
        reader.skip(titan::data::thrift::STRUCT);
        FAIL("no error");
      } catch (const titan::data::ThriftError& e) {
        CHECK(std::string(e.what()).find(fragment) != std::string::npos);
      }
    };
    fails(std::string("\x19\xF5\x7F", 3), "a list of");                       // 127 i32s in 0 bytes
    fails(std::string("\x18\x64" "ab", 4), "a binary of 100 bytes runs past the end");
    fails(std::string(40, '\x1C'), "nested more than");                        // struct in struct …
    fails(std::string("\x15\xFF\xFF\xFF\xFF\xFF\x01", 7), "a varint longer than 32 bits");
    fails(std::string("\x16") + std::string(9, '\xFF') + "\x7F", "a varint longer than 64 bits");
    fails(std::string("\x16") + std::string(10, '\xFF') + "\x01", "a varint longer than 64 bits");
    fails(std::string("\x15", 1), "it ends in the middle of a value");
    fails(std::string("\x1F", 1), "unknown type");
  }

  TEST_CASE("parquet: a file that is not Parquet or is cut short before its footer is refused") {
    const std::string dir = parquet_dir("not_parquet");
    write_bytes(dir + "/text.parquet", "{\"text\": \"a JSON line\"}\n");
    CHECK_FALSE(titan::data::has_parquet_magic(dir + "/text.parquet"));
    check_refused(refusal([&] { ParquetFile file(dir + "/text.parquet"); }),
                  {"text.parquet' is not a Parquet file: it does not begin with PAR1"});
    write_bytes(dir + "/empty.parquet", "");
    check_refused(refusal([&] { ParquetFile file(dir + "/empty.parquet"); }),
                  {"empty.parquet' is not a Parquet file", "0 bytes"});
    write_bytes(dir + "/short.parquet", "PAR1PAR1");
    CHECK(titan::data::has_parquet_magic(dir + "/short.parquet"));
    check_refused(refusal([&] { ParquetFile file(dir + "/short.parquet"); }),
                  {"short.parquet' is truncated: 8 bytes"});
    write_bytes(dir + "/cut.parquet", "PAR1" + std::string(100, 'x'));
    check_refused(refusal([&] { ParquetFile file(dir + "/cut.parquet"); }),
                  {"cut.parquet' is truncated: it does not end with PAR1"});
    write_bytes(dir + "/encrypted.parquet", "PAR1" + std::string(100, 'x') + "PARE");
    check_refused(refusal([&] { ParquetFile file(dir + "/encrypted.parquet"); }),
                  {"encrypted Parquet file"});
    write_bytes(dir + "/long_footer.parquet", "PAR1xxxx" + std::string("\xF0\0\0\0", 4) + "PAR1");
    check_refused(refusal([&] { ParquetFile file(dir + "/long_footer.parquet"); }),
                  {"footer length 240 is more than the file holds (16 bytes)"});
    write_bytes(dir + "/bad_footer.parquet", "PAR1" + std::string("\x19\xF5", 2) +
                                                 std::string("\x02\0\0\0", 4) + "PAR1");
    check_refused(refusal([&] { ParquetFile file(dir + "/bad_footer.parquet"); }),
                  {"bad_footer.parquet' has a corrupt footer (2 bytes", "download or write it again"});
    CHECK_FALSE(titan::data::has_parquet_magic(dir + "/missing.parquet"));
  }
}

TEST_SUITE("check node") {
  TEST_CASE("parquet: every codec x plain and dictionary x page v1 and v2 x required and optional "
            "reads back every value written by Arrow's writer and hyparquet-writer") {
    const std::string dir = parquet_dir("matrix");
    const auto with_nulls = titan::testing::parquet_test_documents(11, 700, true);
    const auto without_nulls = titan::testing::parquet_test_documents(12, 700, false);
    REQUIRE(nulls_in(with_nulls) > 50);
    write_bytes(dir + "/nulls.jsonl", titan::testing::parquet_test_jsonl(with_nulls));
    write_bytes(dir + "/full.jsonl", titan::testing::parquet_test_jsonl(without_nulls));

    const std::vector<ParquetSpec> specs =
        titan::testing::parquet_test_matrix("nulls.jsonl", "full.jsonl");
    titan::testing::write_parquet_files(dir, specs);

    for (const ParquetSpec& spec : specs) {
      CAPTURE(spec.describe());
      CAPTURE(spec.path);
      const auto& documents = spec.nullable ? with_nulls : without_nulls;
      const ColumnRead read = read_column(dir + "/" + spec.path, "text");
      CHECK(read.nulls == nulls_in(documents));
      REQUIRE(read.values.size() == present(documents).size());
      CHECK(read.values == present(documents));
      CHECK(read.row_groups >= 2);
      // Several pages a chunk; Arrow's writer gives a dictionary-encoded chunk one page of
      // indices whatever its page size (its pages split by row count, 20,000).
      const bool one_index_page = spec.writer == "parquet-wasm" && spec.dictionary;
      CHECK(read.data_pages >= (one_index_page ? 1 : 2) * static_cast<int64_t>(read.row_groups));
      if (spec.dictionary) {
        CHECK(read.dictionary_pages >= 1);
      } else {
        CHECK(read.dictionary_pages == 0);
      }
    }

    // Another column of the same file, and what the file says of its columns.
    ParquetFile file(dir + "/" + specs[5].path);
    CHECK(file.rows() == 700);
    CHECK(file.column_names() == "text (string, optional), id (INT64, optional), url (string, optional)");
    const ColumnRead urls = read_column(dir + "/" + specs[5].path, "url");
    REQUIRE(urls.values.size() == 700);
    CHECK(urls.values[699] == "https://example.com/699");
  }

  TEST_CASE("parquet: every hostile file is refused with one line naming the file and the place") {
    const std::string dir = parquet_dir("hostile");
    const auto documents = titan::testing::parquet_test_documents(13, 400, true);
    write_bytes(dir + "/docs.jsonl", titan::testing::parquet_test_jsonl(documents));
    auto spec = [](const std::string& path) {
      ParquetSpec s;
      s.path = path;
      s.documents = "docs.jsonl";
      s.row_group_rows = 100;
      return s;
    };
    std::vector<ParquetSpec> specs;
    specs.push_back(spec("good.parquet"));
    specs.push_back(spec("plain.parquet"));
    specs.back().dictionary = false;
    specs.push_back(spec("bad_crc.parquet"));
    specs.back().bad_crc = true;
    specs.push_back(spec("brotli.parquet"));
    specs.back().compression = "BROTLI";
    specs.push_back(spec("lz4.parquet"));
    specs.back().compression = "LZ4_RAW";
    specs.push_back(spec("delta.parquet"));
    specs.back().dictionary = false;
    specs.back().encoding = "DELTA_BYTE_ARRAY";
    specs.back().version = 2;
    specs.push_back(spec("delta_length.parquet"));
    specs.back().dictionary = false;
    specs.back().encoding = "DELTA_LENGTH_BYTE_ARRAY";
    specs.push_back(spec("nested.parquet"));
    specs.back().nested = true;
    titan::testing::write_parquet_files(dir, specs);
    auto open_text = [&](const std::string& name) {
      return refusal([&] { read_column(dir + "/" + name, "text"); });
    };
    CHECK(open_text("good.parquet").empty());

    check_refused(open_text("bad_crc.parquet"),
                  {"bad_crc.parquet': row group 0 of 4, column 'text', page ", "CRC mismatch",
                   "download or write it again"});
    check_refused(open_text("brotli.parquet"),
                  {"brotli.parquet': row group 0 of 4, column 'text': compressed with BROTLI",
                   "UNCOMPRESSED, SNAPPY, GZIP and ZSTD"});
    check_refused(open_text("lz4.parquet"), {"compressed with LZ4_RAW"});
    check_refused(open_text("delta.parquet"),
                  {"delta.parquet': row group 0 of 4, column 'text': encoded with DELTA_BYTE_ARRAY"});
    check_refused(open_text("delta_length.parquet"), {"encoded with DELTA_LENGTH_BYTE_ARRAY"});
    auto column = [&](const std::string& name, const std::string& field) {
      return refusal([&] { read_column(dir + "/" + name, field); });
    };
    check_refused(column("good.parquet", "body"),
                  {"good.parquet' has no column 'body' (its columns: text (string, optional), id "
                   "(INT64, optional), url (string, optional)); name its text column with --field"});
    check_refused(column("good.parquet", "id"),
                  {"column 'id' of input '", "holds INT64, not strings (BYTE_ARRAY)", "--field"});
    check_refused(column("nested.parquet", "tags"),
                  {"column 'tags' of input '", "is a nested group of 1 field",
                   "only a top-level string column is read"});
    check_refused(column("nested.parquet", "meta"), {"column 'meta'", "nested group of 1 field"});
    CHECK(column("nested.parquet", "text").empty());

    // Cut short: the footer is gone.
    const std::string good = titan::testing::read_file(dir + "/good.parquet");
    write_bytes(dir + "/cut.parquet", good.substr(0, good.size() * 2 / 3));
    check_refused(open_text("cut.parquet"), {"cut.parquet' is truncated: it does not end with PAR1"});
    // The footer kept, the data before it cut out: the chunks lie outside the file.
    uint32_t footer = 0;
    std::memcpy(&footer, good.data() + good.size() - 8, 4);
    write_bytes(dir + "/hollow.parquet", "PAR1" + good.substr(good.size() - 8 - footer - 10));
    check_refused(open_text("hollow.parquet"),
                  {"hollow.parquet'", "lie outside the file's data", "truncated or corrupt"});

    // A damaged page, without a CRC to catch it: each codec's check, or the page's own counts,
    // name the row group and the page.
    for (size_t at : {size_t{30}, size_t{200}, size_t{600}}) {
      CAPTURE(at);
      for (const std::string& name : {std::string("good.parquet"), std::string("plain.parquet")}) {
        CAPTURE(name);
        std::string damaged = titan::testing::read_file(dir + "/" + name);
        ParquetFile original(dir + "/" + name);
        const auto c = original.string_column("text", "--field").chunk(1);
        REQUIRE(at + 8 < c.bytes);
        for (size_t i = 0; i < 8; ++i) damaged[c.offset + at + i] = static_cast<char>(0xA5 ^ i);
        write_bytes(dir + "/damaged.parquet", damaged);
        const std::string message = open_text("damaged.parquet");
        // Snappy may decode damaged bytes into other text of the same length: then nothing
        // in the file can tell (the CRC would have), and the values differ.
        if (message.empty()) {
          CHECK(read_column(dir + "/damaged.parquet", "text").values != present(documents));
        } else {
          check_refused(message, {"damaged.parquet': row group 1 of 4, column 'text', page "});
        }
      }
    }
  }
}
