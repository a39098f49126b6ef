// Token sources: the byte tokenizer, the binary token-file format and open_token_source's
// choice between them (data/byte_tokenizer.h, data/token_file.h, data/token_source.h).
//
// Every test writes its files under its own scratch directory, so that ctest may run the
// cases in parallel.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/byte_tokenizer.h"
#include "data/token_file.h"
#include "data/token_source.h"
#include "support/input_error.h"
#include "support/process.h"
#include "support/token_sources.h"

namespace titan::data {
namespace {

using testing::input_error_message;
using testing::open_source;
using testing::read_all;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("ByteTokenizer: encode gives BOS then every byte as 0..255 then EOS") {
    std::string text = "Hi \xC3\xA9\xE2\x82\xAC\n";  // "Hi é€\n": two- and three-byte UTF-8
    std::vector<int32_t> ids = ByteTokenizer().encode_document(text);
    const std::vector<int32_t> expected = {
        ByteTokenizer::kBos, 'H', 'i', ' ', 0xC3, 0xA9, 0xE2, 0x82, 0xAC, '\n',
        ByteTokenizer::kEos};
    CHECK(ids == expected);
    CHECK(ByteTokenizer::kBos == 256);
    CHECK(ByteTokenizer::kEos == 257);
    CHECK(ByteTokenizer::kVocabSize == 258);

    CHECK(ByteTokenizer().encode_document("") ==
          std::vector<int32_t>{ByteTokenizer::kBos, ByteTokenizer::kEos});

    // Every byte value, including NUL and 0xFF, maps to itself.
    std::string all_bytes;
    for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
    std::vector<int32_t> all_ids = ByteTokenizer().encode_document(all_bytes);
    REQUIRE(all_ids.size() == 258);
    for (int b = 0; b < 256; ++b) CHECK(all_ids[b + 1] == b);
  }

  TEST_CASE("ByteTokenizer: decode round-trips and rejects ids that are not bytes") {
    // Greek letters, a NUL inside, a byte that is not valid UTF-8, a NUL at the end.
    std::string text = std::string("In the beginning \xCE\xB1\xCF\x89") + '\0' + "\xFF end" + '\0';
    REQUIRE(text.size() == 28);
    CHECK(ByteTokenizer().decode(ByteTokenizer().encode_document(text)) == text);
    // BOS and EOS anywhere are dropped.
    const std::vector<int32_t> with_markers = {'a', ByteTokenizer::kEos, ByteTokenizer::kBos, 'b'};
    CHECK(ByteTokenizer().decode(with_markers) == "ab");
    CHECK_THROWS_AS(ByteTokenizer().decode(std::vector<int32_t>{'a', 300}), InputError);
    CHECK_THROWS_AS(ByteTokenizer().decode(std::vector<int32_t>{258}), InputError);
    CHECK_THROWS_AS(ByteTokenizer().decode(std::vector<int32_t>{-1}), InputError);
  }

  TEST_CASE("token file: uint16 tokens round-trip with size and vocab bound and ranged reads") {
    std::string path = testing::scratch_dir("token_file_u16") + "/tokens.bin";
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 1000; ++i) tokens.push_back((i * 7919) % 65536);
    tokens.push_back(65535);  // the largest uint16
    write_token_file(path, tokens, 65536, 2);
    CHECK(std::filesystem::file_size(path) == 64 + 2 * tokens.size());

    auto source = open_token_file(path);
    CHECK(source->size() == static_cast<int64_t>(tokens.size()));
    CHECK(source->vocab_bound() == 65536);
    CHECK(read_all(*source) == tokens);

    std::vector<int32_t> middle(10, -1);
    source->read(500, 10, middle.data());
    CHECK(middle == std::vector<int32_t>(tokens.begin() + 500, tokens.begin() + 510));
    source->read(0, 0, middle.data());  // an empty read is fine
    CHECK_THROWS_AS(source->read(995, 10, middle.data()), Error);
    CHECK_THROWS_AS(source->read(-1, 2, middle.data()), Error);
    CHECK(source->describe().find(path) != std::string::npos);
    CHECK(source->describe().find("uint16") != std::string::npos);
  }

  TEST_CASE("token file: uint32 tokens hold ids above 65535") {
    std::string path = testing::scratch_dir("token_file_u32") + "/tokens.bin";
    const std::vector<int32_t> tokens = {0, 65535, 65536, 70000, 128000, 128255, 1, 99999};
    write_token_file(path, tokens, 128256, 4);
    CHECK(std::filesystem::file_size(path) == 64 + 4 * tokens.size());
    auto source = open_token_file(path);
    CHECK(source->size() == 8);
    CHECK(source->vocab_bound() == 128256);
    CHECK(read_all(*source) == tokens);
    std::vector<int32_t> middle(3);
    source->read(2, 3, middle.data());
    CHECK(middle == std::vector<int32_t>{65536, 70000, 128000});
  }

  TEST_CASE("token file: the header is laid out as documented in little-endian") {
    std::string path = testing::scratch_dir("token_file_layout") + "/tokens.bin";
    write_token_file(path, {1, 258, 3}, 300, 2);
    std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() == 64 + 6);
    CHECK(bytes.substr(0, 8) == "TTTOKENS");
    auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
    CHECK(byte(8) == 1);    // version
    CHECK(byte(12) == 2);   // token_bytes
    CHECK(byte(16) == 3);   // token_count
    CHECK(byte(24) == 44);  // vocab_size 300 = 0x012C
    CHECK(byte(25) == 1);
    for (size_t i = 32; i < 64; ++i) CHECK(byte(i) == 0);
    CHECK(byte(66) == 0x02);  // token 258 = 0x0102, low byte first
    CHECK(byte(67) == 0x01);
  }

  TEST_CASE("token file: writing refuses tokens outside the vocab or too wide for the format") {
    std::string path = testing::scratch_dir("token_file_write_errors") + "/tokens.bin";
    CHECK_THROWS_AS(write_token_file(path, {1, 2, 300}, 300, 2), Error);
    CHECK_THROWS_AS(write_token_file(path, {-1}, 300, 2), Error);
    CHECK_THROWS_AS(write_token_file(path, {1}, 70000, 2), Error);  // vocab needs 4-byte tokens
    CHECK_THROWS_AS(write_token_file(path, {1}, 300, 3), Error);
    CHECK_THROWS_AS(write_token_file("/nonexistent-dir/x/tokens.bin", {1}, 300, 2), InputError);
  }

  TEST_CASE("token file: a malformed file is an InputError naming data.path") {
    std::string dir = testing::scratch_dir("token_file_malformed");
    std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10};

    SUBCASE("not a token file") {
      std::string path = dir + "/text.bin";
      write_bytes(path, std::string(200, 'x'));
      std::string message = input_error_message([&] { open_token_file(path); });
      CHECK(message.find("data.path") != std::string::npos);
      CHECK(message.find("TTTOKENS") != std::string::npos);
    }
    SUBCASE("shorter than the header") {
      std::string path = dir + "/short.bin";
      write_bytes(path, "TTTOKENS");
      CHECK(input_error_message([&] { open_token_file(path); }).find("data.path") !=
            std::string::npos);
    }
    SUBCASE("empty") {
      std::string path = dir + "/empty.bin";
      write_bytes(path, "");
      CHECK(input_error_message([&] { open_token_file(path); }).find("data.path") !=
            std::string::npos);
    }
    SUBCASE("truncated") {
      std::string path = dir + "/truncated.bin";
      write_token_file(path, tokens, 100, 4);
      std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
      std::string message = input_error_message([&] { open_token_file(path); });
      CHECK(message.find("data.path") != std::string::npos);
      CHECK(message.find("truncated") != std::string::npos);
    }
    SUBCASE("longer than the header promises") {
      std::string path = dir + "/long.bin";
      write_token_file(path, tokens, 100, 2);
      write_bytes(path, read_bytes(path) + "zz");
      CHECK(input_error_message([&] { open_token_file(path); }).find("data.path") !=
            std::string::npos);
    }
    SUBCASE("wrong version") {
      std::string path = dir + "/version.bin";
      write_token_file(path, tokens, 100, 2);
      std::string bytes = read_bytes(path);
      bytes[8] = 2;
      write_bytes(path, bytes);
      std::string message = input_error_message([&] { open_token_file(path); });
      CHECK(message.find("data.path") != std::string::npos);
      CHECK(message.find("version 2") != std::string::npos);
    }
    SUBCASE("token width other than 2 or 4") {
      std::string path = dir + "/width.bin";
      write_token_file(path, tokens, 100, 2);
      std::string bytes = read_bytes(path);
      bytes[12] = 3;
      write_bytes(path, bytes);
      CHECK(input_error_message([&] { open_token_file(path); }).find("data.path") !=
            std::string::npos);
    }
    SUBCASE("missing") {
      std::string message = input_error_message([&] { open_token_file(dir + "/missing.bin"); });
      CHECK(message.find("data.path") != std::string::npos);
    }
  }

  TEST_CASE("open_token_source: format auto picks binary for .bin and text otherwise") {
    std::string dir = testing::scratch_dir("open_token_source_auto");
    std::string bin_path = dir + "/tokens.bin";
    const std::vector<int32_t> tokens = {1000, 2000, 3000, 4000, 4999};
    write_token_file(bin_path, tokens, 5000, 2);
    std::string txt_path = dir + "/corpus.txt";
    write_bytes(txt_path, "abc\xC3\xA9");

    auto bin = open_source(bin_path, "auto");
    CHECK(bin->size() == 5);
    CHECK(bin->vocab_bound() == 5000);
    CHECK(read_all(*bin) == tokens);

    auto text = open_source(txt_path, "auto");
    CHECK(text->size() == 7);  // BOS + 5 bytes + EOS
    CHECK(text->vocab_bound() == ByteTokenizer::kVocabSize);
    CHECK(read_all(*text) == ByteTokenizer().encode_document("abc\xC3\xA9"));
    std::vector<int32_t> middle(2);
    text->read(3, 2, middle.data());
    CHECK(middle == std::vector<int32_t>{'c', 0xC3});
    CHECK_THROWS_AS(text->read(6, 2, middle.data()), Error);
    CHECK(text->describe().find(txt_path) != std::string::npos);

    // A file with no extension is text too.
    std::string plain_path = dir + "/corpus";
    write_bytes(plain_path, "xy");
    CHECK(open_source(plain_path, "auto")->size() == 4);
  }

  TEST_CASE("open_token_source: an explicit format overrides the extension") {
    std::string dir = testing::scratch_dir("open_token_source_explicit");
    std::string bin_path = dir + "/tokens.bin";
    write_token_file(bin_path, {7, 8, 9}, 10, 2);
    std::string disguised = dir + "/tokens.dat";
    std::filesystem::copy_file(bin_path, disguised,
                               std::filesystem::copy_options::overwrite_existing);

    auto as_bin = open_source(disguised, "bin");
    CHECK(read_all(*as_bin) == std::vector<int32_t>{7, 8, 9});

    auto as_text = open_source(bin_path, "text");  // the file's bytes, as text
    CHECK(as_text->size() == static_cast<int64_t>(std::filesystem::file_size(bin_path)) + 2);
    CHECK(as_text->vocab_bound() == ByteTokenizer::kVocabSize);

    // Plain text read as "bin" is a malformed token file.
    std::string txt_path = dir + "/corpus.txt";
    write_bytes(txt_path, "plain text, not tokens");
    CHECK(input_error_message([&] { open_source(txt_path, "bin"); }).find("data.path") !=
          std::string::npos);
  }

  TEST_CASE("open_token_source: missing paths and unknown formats are InputErrors naming the key") {
    std::string dir = testing::scratch_dir("open_token_source_errors");
    std::string missing = dir + "/no-such-file.txt";
    std::string message = input_error_message([&] { open_source(missing, "auto"); });
    CHECK(message.find("data.path") != std::string::npos);
    CHECK(message.find("does not exist") != std::string::npos);
    CHECK(message.find(missing) != std::string::npos);

    CHECK(input_error_message([&] { open_source(dir, "auto"); }).find("holds no .bin") !=
          std::string::npos);
    CHECK(input_error_message([&] { open_source("", "auto"); }).find("data.path") !=
          std::string::npos);

    std::string txt_path = dir + "/corpus.txt";
    write_bytes(txt_path, "abc");
    std::string bad_format = input_error_message([&] { open_source(txt_path, "parquet"); });
    CHECK(bad_format.find("data.format") != std::string::npos);
    CHECK(bad_format.find("parquet") != std::string::npos);
  }

}  // TEST_SUITE("fast")

}  // namespace titan::data
