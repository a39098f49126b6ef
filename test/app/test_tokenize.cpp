// titan_tokenize end to end (tools/tokenize/, data/corpus_*.h): a corpus of .jsonl.gz folders,
// .zst, text and glob patterns becomes shards whose concatenation is the expected token stream
// (byte tokenizer: BOS, the document's bytes, EOS), byte-identical for any thread count; bad
// lines counted and named, or an error with --strict; every class of bad input refused with
// exit code 2 and one line; progress lines when stderr is not a terminal, a redrawn bar on one.
// Parquet files written by independent writers (support/parquet_reference.h) give the shards the
// same documents give as JSON lines, byte for byte, and each bad one is refused.
//
// The shards are read back here by hand from the layout in docs/data.md, not through
// data/token_file.h. Each case writes under its own scratch folder (ctest runs them in parallel).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "support/parquet_reference.h"
#include "support/process.h"
#include "support/tokenizer_reference.h"
#include "support/tool_refusal.h"

namespace {

namespace fs = std::filesystem;
using titan::testing::ProcessResult;
using titan::testing::read_file;
using titan::testing::run_process;

constexpr int32_t kBos = 256, kEos = 257;  // the byte tokenizer's

// An empty folder for one case.
std::string tokenize_dir(const std::string& name) {
  std::string dir = titan::testing::scratch_dir("tokenize") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_tokenize_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// `gzip` or `zstd` (the command-line tools, not this project's code) writes `path`.compressed.
std::string compress(const std::string& path, const std::string& tool) {
  const std::string out = path + (tool == "gzip" ? ".gz" : ".zst");
  // In braces: run_process sends the command's stdout to its own capture file.
  ProcessResult r = run_process("{ " + tool + " -q -c '" + path + "' > '" + out + "'; }");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  fs::remove(path);
  return out;
}

std::string tokenize_json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
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

// Deterministic documents of 0 to a few hundred bytes: ASCII words, accents, CJK, emoji, and
// (for JSON only) newlines, quotes, tabs and backslashes.
std::vector<std::string> make_documents(uint64_t seed, int count, bool json) {
  const std::vector<std::string> words = {"the",  "King", "James", "é", "naïve", "日本語",
                                          "🙂", "42",   "don't", "x", "Ωμέγα", "    "};
  const std::vector<std::string> json_only = {"\n", "\"", "\t", "\\", "line\nbreak"};
  std::vector<std::string> docs;
  uint64_t state = seed;
  auto next = [&](uint64_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % bound;
  };
  for (int d = 0; d < count; ++d) {
    std::string doc;
    const uint64_t n = next(7) == 0 ? 0 : next(60);  // some empty documents
    for (uint64_t w = 0; w < n; ++w) {
      if (json && next(8) == 0) {
        doc += json_only[next(json_only.size())];
      } else {
        doc += words[next(words.size())];
      }
      doc += ' ';
    }
    docs.push_back(doc);
  }
  return docs;
}

std::string jsonl(const std::vector<std::string>& docs) {
  std::string text;
  for (const std::string& doc : docs)
    text += "{\"id\": 7, \"text\": " + tokenize_json_string(doc) + "}\n";
  return text;
}

// BOS, bytes, EOS per non-empty document: the byte tokenizer's stream.
void append_expected(std::vector<int32_t>& stream, const std::vector<std::string>& docs) {
  for (const std::string& doc : docs) {
    if (doc.empty()) continue;
    stream.push_back(kBos);
    for (unsigned char c : doc) stream.push_back(c);
    stream.push_back(kEos);
  }
}

struct TokenFile {
  uint32_t token_bytes = 0;
  uint64_t vocab = 0;
  std::vector<int32_t> tokens;
};

uint64_t le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) value |= uint64_t(uint8_t(bytes[at + i])) << (8 * i);
  return value;
}

// The layout of docs/data.md, read by hand.
TokenFile read_token_file(const std::string& path) {
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 64);
  REQUIRE(bytes.substr(0, 8) == "TTTOKENS");
  REQUIRE(le(bytes, 8, 4) == 1);
  TokenFile file;
  file.token_bytes = static_cast<uint32_t>(le(bytes, 12, 4));
  const uint64_t count = le(bytes, 16, 8);
  file.vocab = le(bytes, 24, 8);
  REQUIRE(bytes.size() == 64 + count * file.token_bytes);
  for (uint64_t i = 0; i < count; ++i) {
    file.tokens.push_back(static_cast<int32_t>(
        le(bytes, 64 + i * file.token_bytes, static_cast<int>(file.token_bytes))));
  }
  return file;
}

// Every file of `dir`, sorted by name.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ProcessResult tokenize(const std::string& args) {
  return run_process(titan::testing::binary_path("titan_tokenize") + " " + args);
}

// Exit code 2 and one stderr line, "titan_tokenize: error: " and every fragment, naming none of
// titan_train's config keys (its user has none to set).
void check_tokenize_rejected(const std::string& args, const std::vector<std::string>& fragments) {
  CAPTURE(args);
  ProcessResult r = tokenize(args);
  CAPTURE(r.err);
  CHECK(r.exit_code == 2);
  const std::vector<std::string> lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].starts_with("titan_tokenize: error: "));
  for (const std::string& fragment : fragments) {
    CHECK_MESSAGE(lines[0].find(fragment) != std::string::npos, fragment);
  }
  titan::testing::check_names_no_trainer_key("titan_tokenize", r.err + r.out);
}

std::string strip_dir(std::string text, const std::string& dir) {
  for (size_t at; (at = text.find(dir + "/")) != std::string::npos;) text.erase(at, dir.size() + 1);
  return text;
}

}  // namespace

TEST_SUITE("check") {
  TEST_CASE(
      "titan_tokenize: .jsonl.gz and .zst folders with a text file and a glob give the shards") {
    const std::string dir = tokenize_dir("corpus");
    std::vector<int32_t> expected;

    // A folder: its corpus files sorted by path, recursively; other files skipped.
    const auto part0 = make_documents(1, 300, true), part1 = make_documents(2, 200, true),
               part2 = make_documents(3, 150, true), part3 = make_documents(4, 100, true);
    write_tokenize_file(dir + "/c4/part-00001.jsonl", jsonl(part1));
    write_tokenize_file(dir + "/c4/part-00000.jsonl", jsonl(part0));
    write_tokenize_file(dir + "/c4/more/part-00002.json", jsonl(part2));
    write_tokenize_file(dir + "/c4/more/part-00003.jsonl", jsonl(part3));
    compress(dir + "/c4/part-00001.jsonl", "gzip");
    compress(dir + "/c4/part-00000.jsonl", "gzip");
    compress(dir + "/c4/more/part-00002.json", "gzip");
    compress(dir + "/c4/more/part-00003.jsonl", "zstd");
    write_tokenize_file(dir + "/c4/README.md", "not a corpus file\n");
    write_tokenize_file(dir + "/c4/.hidden.jsonl", "{\"text\": \"skipped\"}\n");
    write_tokenize_file(dir + "/c4/tokens.bin", "TTTOKENS");
    // Sorted by path: more/part-00002, more/part-00003, part-00000, part-00001.
    append_expected(expected, part2);
    append_expected(expected, part3);
    append_expected(expected, part0);
    append_expected(expected, part1);

    // A text file: one document per line; "\r\n" and a last line without "\n" are lines too.
    const std::string text =
        "In the beginning\r\nGod created\n\nthe heaven\tand the earth. 日本 🙂\nlast";
    write_tokenize_file(dir + "/notes.txt", text);
    append_expected(expected, {"In the beginning", "God created", "",
                               "the heaven\tand the earth. 日本 🙂", "last"});

    // A glob pattern, expanded by titan_tokenize: matches sorted.
    const auto b = make_documents(5, 80, true), a = make_documents(6, 90, true);
    write_tokenize_file(dir + "/glob/b.jsonl", jsonl(b));
    write_tokenize_file(dir + "/glob/a.jsonl", jsonl(a));
    write_tokenize_file(dir + "/glob/c.txt", "not matched\n");
    append_expected(expected, a);
    append_expected(expected, b);
    REQUIRE(expected.size() > 20000);

    const int64_t shard_tokens = 5000;
    const std::string inputs = dir + "/c4 " + dir + "/notes.txt '" + dir + "/glob/*.jsonl' ";
    std::vector<std::vector<std::string>> runs;
    for (int threads : {1, 4}) {
      CAPTURE(threads);
      const std::string out = dir + "/out" + std::to_string(threads);
      // Small batches: many in flight, finishing out of order on 4 threads.
      ProcessResult r =
          tokenize("--threads " + std::to_string(threads) + " --shard-tokens " +
                   std::to_string(shard_tokens) + " --batch-bytes 700 " + inputs + out);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      CHECK(r.err.empty());  // no bad line; no progress line in under 5 s
      CHECK(r.out.find("titan_tokenize: 7 files") != std::string::npos);
      CHECK(r.out.find(std::to_string(threads) + " thread") != std::string::npos);
      CHECK(r.out.find(std::to_string(expected.size()) + " tokens") != std::string::npos);

      const std::vector<std::string> names = listing(out);
      const size_t shards = (expected.size() + shard_tokens - 1) / shard_tokens;
      REQUIRE(names.size() == shards);  // no .tmp left behind
      std::vector<int32_t> stream;
      std::vector<std::string> contents;
      for (size_t i = 0; i < shards; ++i) {
        char name[32];
        std::snprintf(name, sizeof(name), "shard_%05zu.bin", i);
        REQUIRE(names[i] == name);
        TokenFile shard = read_token_file(out + "/" + name);
        CHECK(shard.token_bytes == 2);
        CHECK(shard.vocab == 258);
        // Cut at exactly shard_tokens, mid-document: only the last is shorter.
        if (i + 1 < shards) {
          CHECK(shard.tokens.size() == size_t(shard_tokens));
        } else {
          CHECK(shard.tokens.size() <= size_t(shard_tokens));
        }
        stream.insert(stream.end(), shard.tokens.begin(), shard.tokens.end());
        contents.push_back(read_file(out + "/" + name));
      }
      REQUIRE(stream.size() == expected.size());
      for (size_t i = 0; i < stream.size(); ++i) {
        if (stream[i] != expected[i]) {
          FAIL("token ", i, " is ", stream[i], ", expected ", expected[i]);
        }
      }
      runs.push_back(contents);
    }
    CHECK(runs[0] == runs[1]);  // byte for byte, 1 or 4 threads
  }

  TEST_CASE(
      "titan_tokenize: a second run replaces the shards and removes an earlier run's extra ones") {
    const std::string dir = tokenize_dir("rerun");
    const auto docs = make_documents(7, 200, false);
    std::string lines;
    for (const std::string& doc : docs) lines += doc + "\n";
    write_tokenize_file(dir + "/in.txt", lines);
    std::vector<int32_t> expected;
    append_expected(expected, docs);

    ProcessResult first = tokenize("--shard-tokens 1000 " + dir + "/in.txt " + dir + "/out");
    REQUIRE_MESSAGE(first.exit_code == 0, first.err);
    const size_t many = listing(dir + "/out").size();
    REQUIRE(many == (expected.size() + 999) / 1000);
    write_tokenize_file(dir + "/out/other_00000.bin", "another prefix: kept");

    // A failed run (--strict on a bad line) leaves the earlier shards as they were.
    write_tokenize_file(dir + "/bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": 3}\n");
    ProcessResult failed = tokenize("--strict --shard-tokens 3000 " + dir + "/in.txt " + dir +
                                    "/bad.jsonl " + dir + "/out");
    CHECK(failed.exit_code == 2);
    CHECK(listing(dir + "/out").size() == many + 1);

    ProcessResult second = tokenize("--shard-tokens 3000 " + dir + "/in.txt " + dir + "/out");
    REQUIRE_MESSAGE(second.exit_code == 0, second.err);
    const size_t few = (expected.size() + 2999) / 3000;
    CHECK(second.out.find("removed " + std::to_string(many - few) + " shards of an earlier run") !=
          std::string::npos);
    REQUIRE(listing(dir + "/out").size() == few + 1);
    std::vector<std::string> names = listing(dir + "/out");
    names.erase(names.begin());  // other_00000.bin sorts first
    char last[32];
    std::snprintf(last, sizeof(last), "shard_%05zu.bin", few - 1);
    CHECK(names[few - 1] == last);
    CHECK(read_file(dir + "/out/other_00000.bin") == "another prefix: kept");
    std::vector<int32_t> stream;
    for (size_t i = 0; i < few; ++i) {
      TokenFile shard = read_token_file(dir + "/out/" + names[i]);
      stream.insert(stream.end(), shard.tokens.begin(), shard.tokens.end());
    }
    CHECK(stream == expected);
  }

  TEST_CASE("titan_tokenize: a text file into one .bin is what titan_train reads from the text") {
    const std::string dir = tokenize_dir("single");
    const std::string text = "one\ntwo\r\n\nthree";  // every byte, terminators and all
    write_tokenize_file(dir + "/in.txt", "\xEF\xBB\xBF" + text);
    ProcessResult r = tokenize(dir + "/in.txt " + dir + "/sub/one.bin");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(listing(dir + "/sub") == std::vector<std::string>{"one.bin"});
    std::vector<int32_t> expected;
    append_expected(expected, {"\xEF\xBB\xBF" + text});
    CHECK(read_token_file(dir + "/sub/one.bin").tokens == expected);

    // --text-documents line: a document per line, still one file.
    r = tokenize("--text-documents line " + dir + "/in.txt " + dir + "/lines.bin");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    expected.clear();
    append_expected(expected, {"one", "two", "", "three"});  // the byte-order mark is not text
    CHECK(read_token_file(dir + "/lines.bin").tokens == expected);

    // --text-documents file into shards: a whole file per document.
    r = tokenize("--text-documents file --shard-tokens 4 " + dir + "/in.txt " + dir + "/shards");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(listing(dir + "/shards").size() == (text.size() + 3 + 2 + 3) / 4);
  }

  TEST_CASE(
      "titan_tokenize: bad lines are counted and named and --strict makes the first an error") {
    const std::string dir = tokenize_dir("bad_lines");
    write_tokenize_file(dir + "/a.jsonl",
                        "{\"text\": \"good one\"}\n"           // 1
                        "{\"text\": \"unclosed}\n"             // 2 invalid JSON
                        "[\"text\", \"an array\"]\n"           // 3 not an object
                        "{\"body\": \"no text field\"}\n"      // 4 missing field
                        "{\"text\": 42}\n"                     // 5 not a string
                        "\n"                                   // 6 blank: an empty document
                        "{\"text\": \"\"}\n"                   // 7 empty document
                        "{\"text\": null, \"body\": \"b\"}\n"  // 8 null
                        "{\"text\": \"good two\"}\n");         // 9
    write_tokenize_file(dir + "/b.jsonl", "{\"text\": \"good three\"}\n{\"text\": tru}\n");
    const std::string inputs = dir + "/a.jsonl " + dir + "/b.jsonl ";

    ProcessResult r = tokenize(inputs + dir + "/out");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const std::vector<std::string> lines = r.err_lines();
    REQUIRE(lines.size() == 1);
    const std::string warning = strip_dir(lines[0], dir);
    CHECK(warning.starts_with("titan_tokenize: warning: 6 bad lines skipped (first 5 of 6: "));
    CHECK(warning.find("a.jsonl:2: invalid JSON (") != std::string::npos);
    CHECK(warning.find("a.jsonl:3: not a JSON object (an array)") != std::string::npos);
    CHECK(warning.find("a.jsonl:4: no field \"text\"") != std::string::npos);
    CHECK(warning.find("a.jsonl:5: field \"text\" is a number, not a string") != std::string::npos);
    CHECK(warning.find("a.jsonl:8: field \"text\" is null, not a string") != std::string::npos);
    CHECK(warning.find("b.jsonl:2") == std::string::npos);  // the sixth: counted, not named
    CHECK(warning.find("--strict") != std::string::npos);
    CHECK(r.out.find("3 documents") != std::string::npos);
    CHECK(r.out.find("skipped 2 empty documents and 6 bad lines") != std::string::npos);
    std::vector<int32_t> expected;
    append_expected(expected, {"good one", "good two", "good three"});
    CHECK(read_token_file(dir + "/out/shard_00000.bin").tokens == expected);

    // --field chooses another field: now line 4 and 8 are good and the rest lack "body".
    r = tokenize("--field body " + inputs + dir + "/out_body");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    expected.clear();
    append_expected(expected, {"no text field", "b"});
    CHECK(read_token_file(dir + "/out_body/shard_00000.bin").tokens == expected);
    CHECK(strip_dir(r.err, dir).find("a.jsonl:1: no field \"body\"") != std::string::npos);

    // --strict: the first bad line in input order, named, and nothing written.
    r = tokenize("--strict --threads 4 --batch-bytes 10 " + inputs + dir + "/out_strict");
    CHECK(r.exit_code == 2);
    REQUIRE(r.err_lines().size() == 1);
    CHECK(strip_dir(r.err_lines()[0], dir)
              .starts_with("titan_tokenize: error: a.jsonl:2: invalid JSON (a string not closed)"));
    CHECK(r.err.find("leave out --strict") != std::string::npos);
    CHECK(listing(dir + "/out_strict").empty());
  }

  TEST_CASE("titan_tokenize: bad input exits 2 with one line naming the file and the fix") {
    const std::string dir = tokenize_dir("bad_input");
    const std::string out = dir + "/out";
    write_tokenize_file(dir + "/good.txt", "a line\n");
    const std::string good = dir + "/good.txt ";

    check_tokenize_rejected("", {"no input and no output folder given", "INPUT... OUTPUT_DIR"});
    check_tokenize_rejected(out, {"no input given"});
    check_tokenize_rejected(dir + "/missing.jsonl " + out, {"missing.jsonl' does not exist"});
    check_tokenize_rejected("/dev/null " + out, {"'/dev/null' is not a regular file or folder"});
    write_tokenize_file(dir + "/empty_folder/README.md", "no corpus here");
    check_tokenize_rejected(dir + "/empty_folder " + out,
                            {"empty_folder' holds no .txt, .jsonl", ".gz"});
    check_tokenize_rejected("'" + dir + "/*.nothing' " + out, {"*.nothing' matches no file"});
    if (::geteuid() != 0) {  // root reads anything
      write_tokenize_file(dir + "/locked.txt", "secret\n");
      fs::permissions(dir + "/locked.txt", fs::perms::none);
      check_tokenize_rejected(dir + "/locked.txt " + out, {"cannot open input", "locked.txt"});
    }

    // Compressed files cut short or damaged.
    std::string lines;
    for (int i = 0; i < 3000; ++i) lines += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
    write_tokenize_file(dir + "/whole.jsonl", lines);
    const std::string gz = read_file(compress(dir + "/whole.jsonl", "gzip"));
    write_tokenize_file(dir + "/cut.jsonl.gz", gz.substr(0, gz.size() * 2 / 3));
    check_tokenize_rejected(
        dir + "/cut.jsonl.gz " + out,
        {"cut.jsonl.gz' is truncated", "gzip stream ends early", "compress it again"});
    write_tokenize_file(dir + "/trailer_cut.jsonl.gz",
                        gz.substr(0, gz.size() - 4));  // the length lost
    check_tokenize_rejected(dir + "/trailer_cut.jsonl.gz " + out,
                            {"trailer_cut.jsonl.gz' is truncated"});
    std::string damaged = gz;
    for (size_t i = 40; i < 60; ++i) damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
    write_tokenize_file(dir + "/damaged.json.gz", damaged);
    check_tokenize_rejected(dir + "/damaged.json.gz " + out,
                            {"damaged.json.gz' is not valid gzip", "zlib: "});
    write_tokenize_file(dir + "/empty.jsonl.gz", "");
    check_tokenize_rejected(dir + "/empty.jsonl.gz " + out, {"empty.jsonl.gz' is empty"});
    write_tokenize_file(dir + "/whole2.jsonl", lines);
    const std::string zst = read_file(compress(dir + "/whole2.jsonl", "zstd"));
    write_tokenize_file(dir + "/cut.jsonl.zst", zst.substr(0, zst.size() / 2));
    check_tokenize_rejected(dir + "/cut.jsonl.zst " + out, {"cut.jsonl.zst' is truncated", "zstd"});
    const bool left_nothing = !fs::exists(out) || listing(out).empty();
    CHECK(left_nothing);  // failed runs leave no shard, no .tmp

    // Output folders that cannot be.
    check_tokenize_rejected(good + dir + "/good.txt/out",
                            {"cannot create output folder", "good.txt/out"});
    write_tokenize_file(dir + "/a_file", "x");
    check_tokenize_rejected(good + dir + "/a_file", {"output folder", "a_file' is a file"});
    check_tokenize_rejected(good + "/proc", {"output folder '/proc' is not writable"});

    // Tokenizer and flags.
    check_tokenize_rejected("--tokenizer " + dir + "/no/tokenizer.json " + good + out,
                            {"--tokenizer", "no/tokenizer.json"});
    check_tokenize_rejected("--shard-tokens 0 " + good + out, {"--shard-tokens 0", "positive"});
    check_tokenize_rejected("--shard-tokens -5 " + good + out, {"--shard-tokens -5", "positive"});
    check_tokenize_rejected("--shard-tokens 10 " + good + dir + "/x.bin",
                            {"--shard-tokens", "x.bin"});
    check_tokenize_rejected("--threads 0 " + good + out, {"--threads 0"});
    check_tokenize_rejected("--text-documents page " + good + out, {"--text-documents"});
    check_tokenize_rejected("--shards 3 " + good + out, {"--shards", "titan_tokenize --help"});
    check_tokenize_rejected("--output-prefix a/b " + good + out, {"--output-prefix 'a/b'"});
    write_tokenize_file(dir + "/blank.txt", "\n\n\n");
    check_tokenize_rejected(dir + "/blank.txt " + out, {"no document to tokenize", "3 empty"});
  }

  TEST_CASE("titan_tokenize: every refusal names its own flags and none of titan_train's keys") {
    // Beside the cases above (check_tokenize_rejected checks them for trainer keys too): the
    // tokenizer files data/ reads, whose messages take the flag's name from titan_tokenize, and the
    // flags' values.
    const std::string dir = tokenize_dir("own_flags");
    write_tokenize_file(dir + "/good.txt", "a line\n");
    const std::string in_out = " " + dir + "/good.txt " + dir + "/out";
    auto refused = [](const std::string& args, const std::vector<std::string>& fragments) {
      titan::testing::check_tool_refused("titan_tokenize", args, fragments);
    };
    write_tokenize_file(dir + "/not_json/tokenizer.json", "{");
    refused("--tokenizer " + dir + "/not_json/tokenizer.json" + in_out,
            {"--tokenizer", "not_json/tokenizer.json"});
    fs::create_directories(dir + "/no_tokenizer");
    refused("--tokenizer " + dir + "/no_tokenizer" + in_out,
            {"--tokenizer", "is a folder without a tokenizer.json"});
    write_tokenize_file(dir + "/unigram/tokenizer.json",
                        R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
    refused("--tokenizer " + dir + "/unigram/tokenizer.json" + in_out,
            {"--tokenizer", "'Unigram' is not supported"});
    refused("--threads 0" + in_out, {"--threads 0 is not a thread count"});
    refused("--threads 100000" + in_out, {"--threads 100000 is more than 1024"});
    refused("--batch-bytes -1" + in_out, {"--batch-bytes -1; give a positive byte count"});
    refused("--progress-seconds nan" + in_out, {"--progress-seconds nan is not a number"});
    refused("--field ''" + in_out, {"--field is empty"});
    refused("--shard-tokens x" + in_out, {"--shard-tokens", "titan_tokenize --help"});
  }

  TEST_CASE("titan_tokenize: Llama 3's tokenizer.json gives uint32 shards on any thread count" *
            doctest::test_suite("check node")) {
    const std::string tokenizer_json = titan::testing::llama3_tokenizer_json();
    const std::string dir = tokenize_dir("llama3");
    const auto docs = make_documents(9, 400, true);
    write_tokenize_file(dir + "/in.jsonl", jsonl(docs));
    compress(dir + "/in.jsonl", "gzip");
    write_tokenize_file(dir + "/verses.txt",
                        "In the beginning God created the heaven and the earth.\n"
                        "And God said, Let there be light: and there was light.\n");
    // titan_train's own tokenizer (the HF-exact one, tested against Hugging Face elsewhere) per
    // document: the pipeline must only concatenate, in order.
    auto tokenizer = titan::data::load_tokenizer(tokenizer_json, "test");
    REQUIRE(tokenizer->vocab_size() == 128256);
    std::vector<int32_t> expected;
    for (const std::string& doc : docs) {
      if (doc.empty()) continue;
      std::vector<int32_t> ids = tokenizer->encode_document(doc);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    for (const char* verse : {"In the beginning God created the heaven and the earth.",
                              "And God said, Let there be light: and there was light."}) {
      std::vector<int32_t> ids = tokenizer->encode_document(verse);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    CHECK(expected.front() == 128000);  // <|begin_of_text|>

    std::vector<std::vector<std::string>> runs;
    for (int threads : {1, 2}) {
      const std::string out = dir + "/out" + std::to_string(threads);
      // The folder holding tokenizer.json works as well as the file.
      ProcessResult r = tokenize("--tokenizer " + fs::path(tokenizer_json).parent_path().string() +
                                 " --threads " + std::to_string(threads) +
                                 " --shard-tokens 2000 --batch-bytes 3000 " + dir +
                                 "/in.jsonl.gz " + dir + "/verses.txt " + out);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      CHECK(r.out.find("vocab 128256 (uint32 tokens)") != std::string::npos);
      std::vector<int32_t> stream;
      std::vector<std::string> contents;
      for (const std::string& name : listing(out)) {
        TokenFile shard = read_token_file(out + "/" + name);
        CHECK(shard.token_bytes == 4);
        CHECK(shard.vocab == 128256);
        stream.insert(stream.end(), shard.tokens.begin(), shard.tokens.end());
        contents.push_back(read_file(out + "/" + name));
      }
      CHECK(contents.size() == (expected.size() + 1999) / 2000);
      CHECK(stream == expected);
      runs.push_back(contents);
    }
    CHECK(runs[0] == runs[1]);
  }

  TEST_CASE("titan_tokenize: progress as plain lines when stderr is not a terminal") {
    const std::string dir = tokenize_dir("progress");
    const auto docs = make_documents(8, 400, true);
    write_tokenize_file(dir + "/in.jsonl", jsonl(docs));
    ProcessResult r =
        tokenize("--progress-seconds 0 --batch-bytes 2000 " + dir + "/in.jsonl " + dir + "/out");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.err.find('\r') == std::string::npos);
    const std::vector<std::string> lines = r.err_lines();
    REQUIRE(lines.size() >= 3);  // a line per batch
    for (const std::string& line : lines) {
      CAPTURE(line);
      CHECK(line.starts_with("titan_tokenize: "));
      for (const char* part : {"% of ", " MB read, ", " documents, ", " tokens, ", " MB/s, ETA "}) {
        CHECK(line.find(part) != std::string::npos);
      }
    }
    CHECK(lines.back().starts_with("titan_tokenize: 100% of "));
    // The summary on stdout: files, documents, tokens, shards, seconds, MB/s.
    CHECK(r.out.find("titan_tokenize: done: 1 file, ") != std::string::npos);
    for (const char* part : {" documents, ", " tokens, 1 shard ", " s (", " MB/s"}) {
      CHECK_MESSAGE(r.out.find(part) != std::string::npos, part);
    }

    // On a terminal (script(1) gives it one): one line redrawn with "\r", a bar, then "\n".
    r = run_process("script -qec \"" + titan::testing::binary_path("titan_tokenize") + " " + dir +
                    "/in.jsonl " + dir + "/out_tty\" /dev/null");
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    CHECK(r.out.find("\r[####################] 100%") != std::string::npos);
    CHECK(r.out.find(" docs ") != std::string::npos);
    CHECK(r.out.find("titan_tokenize: 100% of") == std::string::npos);
  }

  TEST_CASE("titan_tokenize: Parquet of every codec x plain and dictionary x page v1 and v2 x "
            "required and optional gives the shards of the same documents as JSON lines" *
            doctest::test_suite("check node")) {
    const std::string dir = tokenize_dir("parquet_matrix");
    const auto with_nulls = titan::testing::parquet_test_documents(21, 700, true);
    const auto without_nulls = titan::testing::parquet_test_documents(22, 700, false);
    write_tokenize_file(dir + "/nulls.jsonl", titan::testing::parquet_test_jsonl(with_nulls));
    write_tokenize_file(dir + "/full.jsonl", titan::testing::parquet_test_jsonl(without_nulls));
    const std::vector<titan::testing::ParquetSpec> specs =
        titan::testing::parquet_test_matrix("nulls.jsonl", "full.jsonl");
    titan::testing::write_parquet_files(dir, specs);
    int64_t nulls = 0;
    for (const auto& document : with_nulls) nulls += document ? 0 : 1;
    REQUIRE(nulls > 50);

    // The same documents as JSON lines: a null "text" is a bad line there, skipped as a Parquet
    // null is; 1200-token shards, so that each run writes several.
    const std::string flags = " --shard-tokens 1200 --batch-bytes 3000 ";
    std::map<std::string, std::vector<std::string>> reference;
    for (const char* documents : {"nulls.jsonl", "full.jsonl"}) {
      const std::string out = dir + "/out_" + documents;
      ProcessResult r = tokenize("--threads 1" + flags + dir + "/" + documents + " " + out);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      for (const std::string& name : listing(out)) reference[documents].push_back(read_file(out + "/" + name));
      REQUIRE(reference[documents].size() > 3);
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const titan::testing::ParquetSpec& spec = specs[i];
      CAPTURE(spec.describe());
      CAPTURE(spec.path);
      const std::string out = dir + "/out_" + spec.path;
      // Row groups are the unit of work: one thread or two give the same shards.
      const std::string threads = i % 2 == 0 ? "2" : "1";
      ProcessResult r = tokenize("--threads " + threads + flags + dir + "/" + spec.path + " " + out);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      CHECK(r.err.empty());  // no bad line, no warning
      if (spec.nullable) {
        CHECK(r.out.find(", " + std::to_string(nulls) + " nulls and 0 bad lines") !=
              std::string::npos);
      }
      std::vector<std::string> shards;
      for (const std::string& name : listing(out)) shards.push_back(read_file(out + "/" + name));
      CHECK(shards == reference[spec.documents]);
    }
  }

  TEST_CASE("titan_tokenize: a FineWeb-Edu-like folder of Parquet files and a glob are one stream "
            "in path order" * doctest::test_suite("check node")) {
    const std::string dir = tokenize_dir("parquet_folder");
    // As the dataset's snapshots lie: data/CC-MAIN-…/000_0000N.parquet, each with text, id and
    // url columns, beside a README the folder walk skips.
    std::vector<titan::testing::ParquetSpec> specs;
    std::string expected_jsonl;  // the same documents, in the order titan_tokenize reads them
    const std::vector<std::string> names = {"data/CC-MAIN-2024-10/000_00001.parquet",
                                            "data/CC-MAIN-2024-10/000_00000.parquet",
                                            "data/CC-MAIN-2013-20/000_00000.parquet"};
    std::map<std::string, std::string> jsonl_of;
    for (size_t i = 0; i < names.size(); ++i) {
      const auto documents = titan::testing::parquet_test_documents(30 + i, 400, true);
      const std::string jsonl = "docs" + std::to_string(i) + ".jsonl";
      write_tokenize_file(dir + "/" + jsonl, titan::testing::parquet_test_jsonl(documents));
      fs::create_directories(fs::path(dir + "/" + names[i]).parent_path());
      titan::testing::ParquetSpec spec;
      spec.path = names[i];
      spec.documents = jsonl;
      spec.row_group_rows = 100;
      specs.push_back(spec);
      jsonl_of[names[i]] = jsonl;
    }
    titan::testing::ParquetSpec extra;
    extra.path = "more/part-b.parquet";
    extra.documents = "docs0.jsonl";
    extra.compression = "ZSTD";
    fs::create_directories(dir + "/more");
    specs.push_back(extra);
    titan::testing::write_parquet_files(dir, specs);
    write_tokenize_file(dir + "/data/README.md", "# FineWeb-Edu\n");

    // Sorted by path: CC-MAIN-2013-20/000_00000, CC-MAIN-2024-10/000_00000, …/000_00001; then
    // the glob's match.
    const std::vector<std::string> order = {
        jsonl_of[names[2]], jsonl_of[names[1]], jsonl_of[names[0]], "docs0.jsonl"};
    std::string jsonl_inputs;
    for (const std::string& name : order) jsonl_inputs += dir + "/" + name + " ";
    ProcessResult reference = tokenize("--shard-tokens 4000 " + jsonl_inputs + dir + "/ref");
    REQUIRE_MESSAGE(reference.exit_code == 0, reference.err);
    ProcessResult r = tokenize("--shard-tokens 4000 --threads 2 " + dir + "/data '" + dir +
                               "/more/*.parquet' " + dir + "/out");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(r.out.find("titan_tokenize: 4 files") != std::string::npos);
    const std::vector<std::string> shards = listing(dir + "/out");
    REQUIRE(shards == listing(dir + "/ref"));
    REQUIRE(shards.size() > 2);
    for (const std::string& name : shards) {
      CHECK(titan::testing::files_equal(dir + "/out/" + name, dir + "/ref/" + name));
    }
    // --field names another column.
    r = tokenize("--field url " + dir + "/data/CC-MAIN-2013-20 " + dir + "/urls.bin");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::vector<int32_t> urls;
    append_expected(urls, {"https://example.com/0"});
    const TokenFile file = read_token_file(dir + "/urls.bin");
    REQUIRE(file.tokens.size() > urls.size());
    CHECK(std::vector<int32_t>(file.tokens.begin(), file.tokens.begin() + urls.size()) == urls);
  }

  TEST_CASE("titan_tokenize: bad Parquet input exits 2 with one line naming the file and place" *
            doctest::test_suite("check node")) {
    const std::string dir = tokenize_dir("parquet_bad");
    const std::string out = dir + "/out";
    const auto documents = titan::testing::parquet_test_documents(40, 300, true);
    write_tokenize_file(dir + "/docs.jsonl", titan::testing::parquet_test_jsonl(documents));
    auto spec = [](const std::string& path) {
      titan::testing::ParquetSpec s;
      s.path = path;
      s.documents = "docs.jsonl";
      s.row_group_rows = 100;
      return s;
    };
    std::vector<titan::testing::ParquetSpec> specs = {spec("good.parquet"), spec("bad_crc.parquet"),
                                                      spec("brotli.parquet"), spec("delta.parquet"),
                                                      spec("nested.parquet"), spec("plain.parquet")};
    specs[1].bad_crc = true;
    specs[2].compression = "BROTLI";
    specs[3].dictionary = false;
    specs[3].version = 2;
    specs[3].encoding = "DELTA_BYTE_ARRAY";
    specs[4].nested = true;
    specs[5].dictionary = false;
    specs[5].compression = "UNCOMPRESSED";
    titan::testing::write_parquet_files(dir, specs);
    const std::string good = dir + "/good.parquet ";

    write_tokenize_file(dir + "/json.parquet", "{\"text\": \"not Parquet\"}\n");
    check_tokenize_rejected(dir + "/json.parquet " + out,
                            {"json.parquet' is not a Parquet file: it does not begin with PAR1"});
    const std::string bytes = read_file(dir + "/good.parquet");
    write_tokenize_file(dir + "/cut.parquet", bytes.substr(0, bytes.size() / 2));
    check_tokenize_rejected(dir + "/cut.parquet " + out, {"cut.parquet' is truncated"});
    check_tokenize_rejected("--field body " + good + out,
                            {"good.parquet' has no column 'body' (its columns: text (string, "
                             "optional), id (INT64, optional), url (string, optional))",
                             "--field"});
    check_tokenize_rejected("--field id " + good + out,
                            {"column 'id' of input '", "holds INT64, not strings"});
    check_tokenize_rejected("--field tags " + dir + "/nested.parquet " + out,
                            {"column 'tags' of input '", "nested group"});
    check_tokenize_rejected(dir + "/brotli.parquet " + out,
                            {"brotli.parquet': row group 0 of 3, column 'text': compressed with "
                             "BROTLI"});
    check_tokenize_rejected(dir + "/delta.parquet " + out,
                            {"delta.parquet': row group 0 of 3, column 'text': encoded with "
                             "DELTA_BYTE_ARRAY"});
    check_tokenize_rejected(good + dir + "/bad_crc.parquet " + out,
                            {"bad_crc.parquet': row group 0 of 3, column 'text', page 1",
                             "CRC mismatch"});
    // A damaged page of an uncompressed file: the lengths of its PLAIN values run wrong.
    std::string damaged = read_file(dir + "/plain.parquet");
    const size_t at = damaged.size() / 3;
    for (size_t i = 0; i < 64; ++i) damaged[at + i] = '\xFF';
    write_tokenize_file(dir + "/damaged.parquet", damaged);
    check_tokenize_rejected(dir + "/damaged.parquet " + out,
                            {"damaged.parquet': row group ", ", column 'text', page ",
                             "the file is damaged"});
    CHECK((!fs::exists(out) || listing(out).empty()));

    // A bad footer late in a folder is refused before the first file is read: no progress line,
    // no shard.
    fs::create_directories(dir + "/folder");
    for (int i = 0; i < 3; ++i) {
      fs::copy_file(dir + "/good.parquet", dir + "/folder/" + std::to_string(i) + ".parquet");
    }
    write_tokenize_file(dir + "/folder/9.parquet", bytes.substr(0, 100));
    check_tokenize_rejected("--progress-seconds 0 " + dir + "/folder " + out,
                            {"9.parquet' is truncated"});
  }
}
