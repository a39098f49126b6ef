#include "support/parquet_reference.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "support/process.h"

namespace titan::testing {

std::string ParquetSpec::describe() const {
  return writer + " " + compression + (dictionary ? " dictionary" : " plain") + " v" +
         std::to_string(version) + (nullable ? " optional" : " required") + (crc ? " crc" : "");
}

namespace {

std::string json_text(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", c);
      out += code;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

void write_parquet_files(const std::string& dir, const std::vector<ParquetSpec>& files) {
  const std::string modules = setup_cache_path(
      "npm/parquet_reference/node_modules",
      "the Parquet reference writers (parquet-wasm, hyparquet-writer)");
  std::string spec = "{\"files\": [\n";
  for (size_t i = 0; i < files.size(); ++i) {
    const ParquetSpec& f = files[i];
    spec += std::string(i ? ",\n" : "") + "{\"path\": " + json_text(f.path) +
            ", \"documents\": " + json_text(f.documents) + ", \"writer\": " + json_text(f.writer) +
            ", \"compression\": " + json_text(f.compression) +
            ", \"dictionary\": " + (f.dictionary ? "true" : "false") +
            ", \"version\": " + std::to_string(f.version) +
            ", \"nullable\": " + (f.nullable ? "true" : "false") +
            ", \"crc\": " + (f.crc ? "true" : "false") +
            ", \"bad_crc\": " + (f.bad_crc ? "true" : "false") +
            ", \"nested\": " + (f.nested ? "true" : "false");
    if (f.row_group_rows > 0) spec += ", \"row_group_rows\": " + std::to_string(f.row_group_rows);
    if (f.page_bytes > 0) spec += ", \"page_bytes\": " + std::to_string(f.page_bytes);
    if (f.dictionary_page_bytes > 0) {
      spec += ", \"dictionary_page_bytes\": " + std::to_string(f.dictionary_page_bytes);
    }
    if (!f.encoding.empty()) spec += ", \"encoding\": " + json_text(f.encoding);
    spec += "}";
  }
  spec += "\n]}\n";
  const std::string spec_path = dir + "/parquet_spec.json";
  {
    std::ofstream out(spec_path, std::ios::trunc);
    out << spec;
    REQUIRE(out.good());
  }
  const ProcessResult result =
      run_process("cd '" + dir + "' && TITAN_REFERENCE_MODULES='" + modules + "' node '" +
                  source_path("test/data/parquet_reference/writer.js") + "' '" + spec_path + "'");
  REQUIRE_MESSAGE(result.exit_code == 0, "node writer.js failed: " << result.err);
}

std::vector<ParquetSpec> parquet_test_matrix(const std::string& with_nulls,
                                             const std::string& without_nulls) {
  std::vector<ParquetSpec> specs;
  for (const char* codec : {"UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD"}) {
    for (bool dictionary : {false, true}) {
      for (int version : {1, 2}) {
        for (bool nullable : {false, true}) {
          ParquetSpec spec;
          spec.compression = codec;
          spec.dictionary = dictionary;
          spec.version = version;
          spec.nullable = nullable;
          spec.documents = nullable ? with_nulls : without_nulls;
          spec.row_group_rows = 170;  // several row groups of 700 documents
          // Several pages each.
          spec.page_bytes = 1500;
          spec.path = std::to_string(specs.size()) + ".parquet";
          specs.push_back(spec);
        }
      }
    }
  }
  for (const char* codec : {"UNCOMPRESSED", "SNAPPY", "GZIP"}) {
    for (bool dictionary : {false, true}) {
      for (bool nullable : {false, true}) {
        ParquetSpec spec;
        spec.writer = "hyparquet";
        spec.compression = codec;
        spec.dictionary = dictionary;
        spec.version = 2;
        spec.nullable = nullable;
        spec.documents = nullable ? with_nulls : without_nulls;
        spec.row_group_rows = 300;
        spec.page_bytes = dictionary ? 400 : 2000;  // it sizes a page of indices at 4 bytes each
        spec.path = std::to_string(specs.size()) + ".parquet";
        specs.push_back(spec);
      }
    }
  }
  // CRCs on every page, each codec and page version; a dictionary that outgrows its page and
  // falls back to PLAIN pages in the same chunk.
  for (const char* codec : {"UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD"}) {
    for (int version : {1, 2}) {
      ParquetSpec spec;
      spec.compression = codec;
      spec.version = version;
      spec.documents = with_nulls;
      spec.row_group_rows = 250;
      spec.page_bytes = 100;
      spec.crc = true;
      spec.path = std::to_string(specs.size()) + ".parquet";
      specs.push_back(spec);
    }
  }
  for (int version : {1, 2}) {
    ParquetSpec fallback;
    fallback.documents = with_nulls;
    fallback.version = version;
    fallback.dictionary_page_bytes = 400;
    fallback.page_bytes = 1000;
    fallback.row_group_rows = 350;
    fallback.path = "fallback" + std::to_string(version) + ".parquet";
    specs.push_back(fallback);
  }
  return specs;
}

std::vector<std::optional<std::string>> parquet_test_documents(uint64_t seed, int count,
                                                               bool nulls) {
  const std::vector<std::string> words = {"the", "King",   "James", "é",  "naïve",    "日本語",
                                          "🙂",  "42",     "don't", "x",  "Ωμέγα",    "    ",
                                          "\n", "\"",     "\t",    "\\", "line\nbreak", std::string(1, '\0')};
  std::vector<std::optional<std::string>> documents;
  uint64_t state = seed;
  auto next = [&](uint64_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % bound;
  };
  for (int d = 0; d < count; ++d) {
    if (nulls && next(7) == 0) {
      documents.push_back(std::nullopt);
      continue;
    }
    std::string text;
    const uint64_t n = next(9) == 0 ? 0 : next(60);  // some empty documents
    for (uint64_t w = 0; w < n; ++w) text += words[next(words.size())] + " ";
    // Some repeats, for a dictionary to find.
    if (!documents.empty() && next(5) == 0 && documents.back()) text = *documents.back();
    documents.push_back(text);
  }
  return documents;
}

std::string parquet_test_jsonl(const std::vector<std::optional<std::string>>& documents) {
  std::string text;
  for (size_t i = 0; i < documents.size(); ++i) {
    text += "{\"text\": " + (documents[i] ? json_text(*documents[i]) : std::string("null")) +
            ", \"id\": " + std::to_string(i) + ", \"url\": \"https://example.com/" +
            std::to_string(i) + "\"}\n";
  }
  return text;
}

}  // namespace titan::testing
