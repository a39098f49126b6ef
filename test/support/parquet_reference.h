// Parquet files written by writers that are not this project's (test/data/parquet_reference/
// writer.js): Apache Arrow's Rust writer compiled to WebAssembly (parquet-wasm) and
// hyparquet-writer, at the versions test/data/parquet_reference/package-lock.json locks, which
// scripts/setup.sh --tests installs into .cache/npm/parquet_reference. A test that needs them
// stops with one line naming that setup step when they are missing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace titan::testing {

// One file to write; writer.js's header says what each field means.
struct ParquetSpec {
  std::string path;       // absolute, or relative to the folder given to write_parquet_files
  std::string documents;  // a JSON lines file whose objects' fields become the columns
  std::string writer = "parquet-wasm";
  std::string compression = "SNAPPY";
  bool dictionary = true;
  int version = 1;
  bool nullable = true;
  int row_group_rows = 0;  // 0: the writer's default
  int page_bytes = 0;
  int dictionary_page_bytes = 0;
  bool crc = false;
  bool bad_crc = false;
  std::string encoding;  // "" (PLAIN), or another for the string columns
  bool nested = false;

  // "parquet-wasm SNAPPY dictionary v1 optional": for CAPTURE.
  std::string describe() const;
};

// Writes every file of `files` with one run of writer.js in `dir`; the test stops (REQUIRE) with
// node's error when it fails.
void write_parquet_files(const std::string& dir, const std::vector<ParquetSpec>& files);

// The files every reader test reads, named 0.parquet, 1.parquet, … (and fallback1.parquet,
// fallback2.parquet): Arrow's writer with every codec read × plain and dictionary × data page
// v1 and v2 × required (the documents `without_nulls`) and optional (`with_nulls`), several
// row groups (of 700 documents) and pages each; hyparquet-writer's v2 pages with UNCOMPRESSED, SNAPPY and
// GZIP × plain and dictionary × required and optional; every codec and page version with a
// CRC on every page; a dictionary that outgrows its page and falls back to PLAIN pages.
std::vector<ParquetSpec> parquet_test_matrix(const std::string& with_nulls,
                                             const std::string& without_nulls);

// Deterministic documents of 0 to a few hundred bytes of UTF-8 (ASCII words, accents, CJK,
// emoji, newlines, quotes, tabs, backslashes, and a NUL byte now and then); with `nulls`, every
// seventh or so is a null.
std::vector<std::optional<std::string>> parquet_test_documents(uint64_t seed, int count, bool nulls);

// JSON lines of the documents: {"text": …, "id": i, "url": "https://example.com/i"} a line,
// "text": null for a null. What writer.js turns into columns, and titan_tokenize reads as the
// same documents.
std::string parquet_test_jsonl(const std::vector<std::optional<std::string>>& documents);

}  // namespace titan::testing
