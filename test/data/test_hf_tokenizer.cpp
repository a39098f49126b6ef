// Hugging Face byte-level BPE (data/hf_tokenizer.h, data/bpe.h, data/pretokenizer.h).
//
// unit: a hand-written tokenizer.json of a few tokens and merges whose ids can be worked out
//       by hand: merge order, both merge spellings, ignore_merges, added tokens, invalid UTF-8,
//       the pre-tokenizer's rewrites and split behaviours, BOS/EOS, and every bad file refused
//       with one line naming the key, the file and the JSON key.
// e2e:  token for token against Hugging Face's own tokenizers library (the Rust code, through
//       its Node binding: test/data/tokenizer_reference/), on Llama 3's real tokenizer.json and
//       variants of it, over a varied text set and over every Unicode code point. The npm
//       packages are those scripts/setup.sh --tests installs (support/tokenizer_reference.h);
//       without them the test fails, naming that step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "data/hf_tokenizer.h"
#include "data/pretokenizer.h"
#include "support/input_error.h"
#include "support/process.h"
#include "support/tokenizer_reference.h"

namespace titan::data {
namespace {

using testing::input_error_message;

using testing::run_process;
using testing::scratch_dir;
using testing::source_path;

void write_reference_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  REQUIRE(out.good());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `text` with its one occurrence of `from` replaced by `to`.
std::string replaced(std::string text, std::string_view from, std::string_view to) {
  size_t at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "'" << from << "' is not in the text");
  REQUIRE_MESSAGE(text.find(from, at + 1) == std::string::npos, "'" << from << "' is there twice");
  return text.replace(at, from.size(), to);
}

// ---- The hand-written tokenizer ----

// test/fixtures/tiny_tokenizer.json, written by hand. Byte-level spellings: "Ġ" is a space,
// "Ċ" a newline, "ï" "¿" "½" the bytes of U+FFFD. Merge ranks: b+c before a+b, so "abc" is
// a+bc, not ab+c.
std::string tiny_json() { return testing::fixture_text("tiny_tokenizer.json"); }

constexpr std::string_view kTinyPairMerges =
    R"json("merges": [["b", "c"], ["a", "b"], ["a", "bc"], ["Ġ", "a"], ["ï", "¿"], ["ï¿", "½"]])json";
constexpr std::string_view kTinyStringMerges =
    R"json("merges": ["b c", "a b", "a bc", "Ġ a", "ï ¿", "ï¿ ½"])json";
constexpr std::string_view kTinyPreTokenizerSplit =
    R"json({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false})json";

// Writes `json` as <case>.json under this test's scratch folder and loads it.
std::unique_ptr<HfTokenizer> load_json(const std::string& name, const std::string& json) {
  std::string path = scratch_dir("hf_tokenizer_unit") + "/" + name + ".json";
  write_reference_text(path, json);
  return HfTokenizer::load(path, "data.tokenizer_path");
}

// The InputError message of loading `json`; checks that it is one line naming the key and file.
std::string load_error(const std::string& name, const std::string& json) {
  std::string path = scratch_dir("hf_tokenizer_unit") + "/" + name + ".json";
  write_reference_text(path, json);
  std::string message =
      input_error_message([&] { HfTokenizer::load(path, "data.tokenizer_path"); });
  CHECK_MESSAGE(message.starts_with("data.tokenizer_path: '" + path + "'"), message);
  CHECK_MESSAGE(message.find('\n') == std::string::npos, message);
  return message;
}

std::vector<int32_t> ids(std::initializer_list<int32_t> list) { return list; }

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("HfTokenizer: merges by rank and leftmost first one occurrence at a time") {
    auto tokenizer = load_json("ranks", tiny_json());
    CHECK(tokenizer->encode("abc") == ids({6}));  // b+c (rank 0), then a+bc (rank 2)
    CHECK(tokenizer->encode("ab") == ids({4}));
    CHECK(tokenizer->encode("cab") == ids({2, 4}));         // c+a is no merge
    CHECK(tokenizer->encode("abc abc") == ids({6, 3, 6}));  // " abc": Ġ+a (rank 3) never wins
    CHECK(tokenizer->encode(" a") == ids({7}));
    CHECK(tokenizer->encode("aabab") == ids({0, 4, 4}));
    CHECK(tokenizer->encode("") == ids({}));

    CHECK(tokenizer->encode("abcab") == ids({6, 4}));

    // a+b first instead: "abcab" is ab+c+ab. ("abc" is still one token: with ignore_merges a
    // word that is a token is not merged.)
    auto swapped =
        load_json("ranks_swapped", replaced(tiny_json(), R"("b c", "a b")", R"("a b", "b c")"));
    CHECK(swapped->encode("abcab") == ids({4, 2, 4}));
    CHECK(swapped->encode("abc") == ids({6}));
  }

  TEST_CASE("HfTokenizer: merges as 'a b' strings and as pairs give the same ids") {
    auto strings = load_json("merges_strings", tiny_json());
    auto pairs =
        load_json("merges_pairs", replaced(tiny_json(), kTinyStringMerges, kTinyPairMerges));
    for (std::string_view text : {"abc abc", "cab", "aabab", " a b c", "\xff"}) {
      CHECK(strings->encode(text) == pairs->encode(text));
    }
    CHECK(pairs->encode("abc") == ids({6}));
  }

  TEST_CASE("HfTokenizer: ignore_merges takes a word that is a token as that token") {
    auto ignoring = load_json("ignore_merges", tiny_json());
    auto merging = load_json("no_ignore_merges", replaced(tiny_json(), R"("ignore_merges": true)",
                                                          R"("ignore_merges": false)"));
    CHECK(ignoring->encode("ca") == ids({8}));
    CHECK(merging->encode("ca") == ids({2, 0}));  // no merge makes "ca"
  }

  TEST_CASE("HfTokenizer: added tokens are cut out of the text leftmost and then longest") {
    auto tokenizer = load_json("added", tiny_json());
    CHECK(tokenizer->encode("a<s>b</s>") == ids({0, 19, 1, 20}));
    CHECK(tokenizer->encode("<s>xa") == ids({21, 0}));  // "<s>x" is longer than "<s>"
    CHECK(tokenizer->encode("<s><s>") == ids({19, 19}));
    CHECK(tokenizer->encode("<s") == ids({}));  // '<' and 's' are not in the vocabulary
    CHECK(tokenizer->token_id("<s>") == 19);
    CHECK(tokenizer->token_id("Ġa") == 7);
    CHECK_FALSE(tokenizer->token_id("zz"));
    CHECK(tokenizer->decode(ids({0, 19, 1, 20})) == "a<s>b</s>");
  }

  TEST_CASE("HfTokenizer: lstrip and rstrip added tokens take the white space beside them") {
    std::string json = replaced(
        tiny_json(), R"("content": "</s>", "single_word": false, "lstrip": false, "rstrip": false)",
        R"("content": "</s>", "single_word": false, "lstrip": true, "rstrip": true)");
    auto tokenizer = load_json("strip", json);
    std::vector<std::string> words = tokenizer->words("a  </s>\u3000 b");
    CHECK(words == std::vector<std::string>{"a", "  </s>\u3000 ", "b"});
    CHECK(tokenizer->encode("a  </s>\u3000 b") == ids({0, 20, 1}));
  }

  TEST_CASE("HfTokenizer: invalid UTF-8 becomes one U+FFFD per maximal invalid subsequence") {
    auto tokenizer = load_json("invalid_utf8", tiny_json());
    const std::string fffd = "\xEF\xBF\xBD";
    auto joined = [&](std::string_view text) {
      std::string out;
      for (const std::string& word : tokenizer->words(text)) out += word;
      return out;
    };
    CHECK(joined("\xff") == fffd);
    CHECK(joined("a\x80z") == "a" + fffd + "z");
    CHECK(joined("\xE2\x82"
                 "A") == fffd + "A");                                // a truncated sequence: one
    CHECK(joined("\xC0\xAF") == fffd + fffd);                        // an overlong: each byte
    CHECK(joined("\xED\xA0\x80") == fffd + fffd + fffd);             // a surrogate: each byte
    CHECK(joined("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // above U+10FFFF
    CHECK(joined("x\xF0\x9F\x98") == "x" + fffd);                    // truncated at the end
    CHECK(joined("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");         // valid stays
    CHECK(tokenizer->encode("\xff") == ids({14}));
    CHECK(tokenizer->encode("a\xff"
                            "b") == tokenizer->encode("a" + fffd + "b"));
    CHECK(tokenizer->decode(tokenizer->encode("\xff")) == fffd);
  }

  TEST_CASE(
      "HfTokenizer: bytes whose character is not in the vocabulary are dropped as HF drops them") {
    auto tokenizer = load_json("dropped", tiny_json());
    CHECK(tokenizer->encode("z") == ids({}));
    CHECK(tokenizer->encode("azb") == ids({4}));  // a and b meet once z is gone, and merge
  }

  TEST_CASE(
      "HfTokenizer: white space in the pattern is Unicode White_Space and letters and numbers are "
      "Unicode 16's") {
    auto tokenizer = load_json("pattern_classes", tiny_json());
    // U+180E is no longer White_Space (PCRE2's own \s still takes it): one run of symbols.
    CHECK(tokenizer->words("a\u180E\u180E"
                           "1") == std::vector<std::string>{"a", "\u180E\u180E", "1"});
    CHECK(tokenizer->words("a\u00A0\u00A0"
                           "1") == std::vector<std::string>{"a", "\u00A0", "\u00A0", "1"});
    // Kawi letters (Unicode 15) are letters; Garay digits (Unicode 16) are numbers.
    CHECK(tokenizer->words("x\U00011F04\U00011F05") ==
          std::vector<std::string>{"x\U00011F04\U00011F05"});
    CHECK(tokenizer->words("1\U00010D40\U00010D41"
                           "2") == std::vector<std::string>{"1\U00010D40\U00010D41", "2"});
    // Contractions match in any case, as (?i:...) says.
    CHECK(tokenizer->words("DON'T We'Ll") == std::vector<std::string>{"DON", "'T", " We", "'Ll"});
  }

  TEST_CASE(
      "onig_to_pcre2: rewrites the white space and letter and number escapes and refuses what "
      "PCRE2 reads otherwise") {
    CHECK(onig_to_pcre2(R"(\s+(?!\S))", "k") == R"(\p{White_Space}+(?!\P{White_Space}))");
    CHECK(onig_to_pcre2(R"([^\s\p{L}])", "k").starts_with(R"([^\p{White_Space}\p{L}\x{1C89})"));
    CHECK(onig_to_pcre2(R"(\p{N})", "k").starts_with(R"([\p{N}\x{10D40})"));
    CHECK(onig_to_pcre2(R"(\d)", "k").starts_with(R"([\p{Nd}\x{10D40})"));
    CHECK(onig_to_pcre2(R"(\P{L})", "k").starts_with(R"([^\p{L}\x{1C89})"));
    CHECK(onig_to_pcre2(R"(\p{Lu}\\s[\]s])", "k") == R"(\p{Lu}\\s[\]s])");
    CHECK(onig_to_pcre2(R"(\Q\s\E)", "k") == R"(\Q\s\E)");
    for (std::string_view pattern : {R"(\w+)", R"(\W)", R"(\bx)", R"(\h)", R"(\pL)", R"([a[b]])",
                                     R"([a-z&&[^aeiou]])", R"([\P{L}])"}) {
      std::string message = input_error_message([&] { onig_to_pcre2(pattern, "k"); });
      CHECK_MESSAGE(message.starts_with("k: the pattern '" + std::string(pattern) + "' uses "),
                    message);
    }
  }

  TEST_CASE(
      "HfTokenizer: the five Split behaviours (also inverted) and GPT-2's ByteLevel with a prefix "
      "space") {
    auto with_split = [&](std::string_view behavior, bool invert) {
      std::string pre = std::string(R"json({"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"String": "-"}, "behavior": ")json") +
                        std::string(behavior) + R"json(", "invert": )json" +
                        (invert ? "true" : "false") + "}, " + std::string(kTinyPreTokenizerSplit) +
                        "]}";
      std::string json = tiny_json();
      size_t start = json.find(R"("pre_tokenizer": )") + 17;
      size_t end = json.find(R"(,
  "post_processor")");
      json.replace(start, end - start, pre);
      return load_json("split_" + std::string(behavior) + (invert ? "_inverted" : ""), json)
          ->words("the-final--countdown");
    };
    using Words = std::vector<std::string>;
    CHECK(with_split("Removed", false) == Words{"the", "final", "countdown"});
    CHECK(with_split("Isolated", false) == Words{"the", "-", "final", "-", "-", "countdown"});
    CHECK(with_split("MergedWithPrevious", false) == Words{"the-", "final-", "-", "countdown"});
    CHECK(with_split("MergedWithNext", false) == Words{"the", "-final", "-", "-countdown"});
    CHECK(with_split("Contiguous", false) == Words{"the", "-", "final", "--", "countdown"});
    CHECK(with_split("Removed", true) == Words{"-", "-", "-"});

    std::string gpt2 = replaced(
        tiny_json(), R"json({"type": "Sequence")json",
        R"json({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}, "unused": {"type": "Sequence")json");
    auto tokenizer = load_json("gpt2_prefix", gpt2);
    CHECK(tokenizer->words("abc  abc<s>ab") == Words{" abc", " ", " abc", "<s>", " ab"});
    CHECK(tokenizer->encode("abc") == ids({3, 6}));
  }

  TEST_CASE("HfTokenizer: BOS from the post-processor's template or else by name and EOS by name") {
    auto named = load_json("bos_named", tiny_json());
    CHECK(named->bos_id() == 19);  // "<s>"
    CHECK(named->eos_id() == 20);  // "</s>"
    CHECK(named->encode_document("ab") == ids({19, 4, 20}));
    CHECK(named->vocab_size() == 22);
    CHECK(named->describe().find("22 tokens, 6 merges; BOS '<s>' (19), EOS '</s>' (20)") !=
          std::string::npos);

    std::string templated =
        replaced(tiny_json(), R"json("post_processor": {"type": "ByteLevel")json",
                 R"json("post_processor": {"type": "Sequence", "processors": [
          {"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<s>x", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [],
           "special_tokens": {"<s>x": {"id": "<s>x", "ids": [21], "tokens": ["<s>x"]}}}]},
        "unused": {"type": "ByteLevel")json");
    CHECK(load_json("bos_template", templated)->bos_id() == 21);

    std::string unnamed =
        replaced(replaced(tiny_json(), R"("content": "<s>")", R"("content": "<t>")"),
                 R"("content": "</s>")", R"("content": "</t>")");
    auto none = load_json("bos_none", unnamed);
    CHECK_FALSE(none->bos_id());
    CHECK_FALSE(none->eos_id());
    CHECK(none->encode_document("ab") == ids({4}));
  }

  TEST_CASE("HfTokenizer: decode gives each token's bytes and refuses an id no token has") {
    auto tokenizer = load_json("decode", tiny_json());
    CHECK(tokenizer->decode(ids({6, 3, 6, 15})) == "abc abc\n");
    CHECK(tokenizer->decode(tokenizer->encode("abc ab\ncab")) == "abc ab\ncab");
    for (int32_t id : {22, -1, 1 << 30}) {
      std::string message = input_error_message([&] { tokenizer->decode(ids({0, id})); });
      CHECK_MESSAGE(message.starts_with("decode: id " + std::to_string(id) + " is not a token of"),
                    message);
    }
  }

  TEST_CASE("HfTokenizer: a folder holding tokenizer.json loads (through load_tokenizer too)") {
    std::string folder = scratch_dir("hf_tokenizer_unit") + "/model_folder";
    std::filesystem::create_directories(folder);
    write_reference_text(folder + "/tokenizer.json", tiny_json());
    auto tokenizer = load_tokenizer(folder, "model.hf_assets_path");
    CHECK(tokenizer->encode("abc") == ids({6}));
    CHECK(tokenizer->vocab_size() == 22);
  }

  TEST_CASE("HfTokenizer: encode from many threads at once gives the same ids") {
    auto tokenizer = load_json("threads", tiny_json());
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i)
      texts.push_back(std::string(i % 7, 'a') + " abc\xff" + std::string(i % 5, 'b') + "<s>");
    std::vector<std::vector<int32_t>> expected;
    for (const std::string& text : texts) expected.push_back(tokenizer->encode(text));
    std::vector<int> wrong(8, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 200; ++round) {
          for (size_t i = 0; i < texts.size(); ++i)
            wrong[t] += tokenizer->encode(texts[i]) != expected[i];
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(std::count(wrong.begin(), wrong.end(), 0) == 8);
  }

  TEST_CASE("HfTokenizer: each bad file is refused with one line naming the file and the key") {
    const std::string tiny(tiny_json());
    std::string dir = scratch_dir("hf_tokenizer_unit");

    std::string missing =
        input_error_message([&] { HfTokenizer::load(dir + "/nope.json", "data.tokenizer_path"); });
    CHECK(missing.starts_with("data.tokenizer_path: '" + dir + "/nope.json': cannot open: "));
    std::filesystem::create_directories(dir + "/empty_folder");
    CHECK(input_error_message([&] {
            HfTokenizer::load(dir + "/empty_folder", "model.hf_assets_path");
          }).find("is a folder without a tokenizer.json") != std::string::npos);

    CHECK(load_error("bad_not_json", "{\"model\": ").find(": not JSON (") != std::string::npos);
    CHECK(load_error("bad_model_type", replaced(tiny, R"("type": "BPE")", R"("type": "Unigram")"))
              .find("model.type: 'Unigram' is not supported") != std::string::npos);
    CHECK(load_error("bad_byte_fallback",
                     replaced(tiny, R"("byte_fallback": false)", R"("byte_fallback": true)"))
              .find("model.byte_fallback: true") != std::string::npos);
    CHECK(load_error("bad_merge_left", replaced(tiny, R"("b c", "a b")", R"("q c", "a b")"))
              .find("model.merges[0] ('q', 'c'): its left token 'q' is not in model.vocab") !=
          std::string::npos);
    CHECK(load_error("bad_merge_result", replaced(tiny, R"("b c", "a b")", R"("c c", "a b")"))
              .find("model.merges[0] ('c', 'c'): its result 'cc' is not in model.vocab") !=
          std::string::npos);
    CHECK(load_error("bad_merge_spelling", replaced(tiny, R"("b c", "a b")", R"("b c d", "a b")"))
              .find("model.merges[0]: 'b c d' is not two tokens separated by one space") !=
          std::string::npos);
    CHECK(load_error("bad_merge_pair",
                     replaced(tiny, kTinyStringMerges, R"("merges": [["b", "c", "d"]])"))
              .find("model.merges[0]: expected \"a b\" or [\"a\", \"b\"], found an array") !=
          std::string::npos);
    CHECK(load_error("bad_vocab_negative", replaced(tiny, R"("x": 18)", R"("x": -3)"))
              .find("model.vocab: token 'x' has id -3, outside 0..16777215") != std::string::npos);
    CHECK(load_error("bad_vocab_huge", replaced(tiny, R"("x": 18)", R"("x": 4000000000)"))
              .find("model.vocab: token 'x' has id 4000000000, outside") != std::string::npos);
    CHECK(load_error("bad_vocab_sparse", replaced(tiny, R"("x": 18)", R"("x": 11111110)"))
              .find("tokens, but ids up to 11111110; ids must number the tokens nearly densely") !=
          std::string::npos);
    CHECK(load_error("bad_vocab_not_integer", replaced(tiny, R"("x": 18)", R"("x": "18")"))
              .find("model.vocab['x']: expected an integer, found a string") != std::string::npos);
    CHECK(load_error("bad_vocab_duplicate_id", replaced(tiny, R"("x": 18)", R"("x": 17)"))
              .find("model.vocab: id 17 is given to both '-' and 'x'") != std::string::npos);
    CHECK(
        load_error("bad_vocab_duplicate_token", replaced(tiny, R"("x": 18)", R"("x": 18, "x": 22)"))
            .find("not JSON (the key \"x\" appears twice in model.vocab, at line ") !=
        std::string::npos);
    CHECK(load_error("bad_added_id", replaced(tiny, R"("id": 21)", R"("id": 25)"))
              .find("added_tokens[2].id: '<s>x' has id 25, but Hugging Face's tokenizers gives it "
                    "21") != std::string::npos);
    CHECK(load_error("bad_added_single_word",
                     replaced(tiny, R"("content": "<s>x", "single_word": false)",
                              R"("content": "<s>x", "single_word": true)"))
              .find("added_tokens[2].single_word: true is not supported") != std::string::npos);
    CHECK(load_error("bad_normalizer",
                     replaced(tiny, R"("normalizer": null)", R"("normalizer": {"type": "NFC"})"))
              .find("normalizer: the normalizer 'NFC' is not supported") != std::string::npos);
    CHECK(load_error("bad_pre_tokenizer_type",
                     replaced(tiny, R"({"type": "Sequence")",
                              R"({"type": "Whitespace"}, "unused": {"type": "Sequence")"))
              .find("pre_tokenizer.type: the pre-tokenizer 'Whitespace' is not supported") !=
          std::string::npos);
    CHECK(load_error(
              "bad_pre_tokenizer_no_byte_level",
              replaced(tiny, kTinyPreTokenizerSplit,
                       R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated"})"))
              .find("pre_tokenizer: no ByteLevel step") != std::string::npos);
    CHECK(
        load_error("bad_regex", replaced(tiny, R"("Regex": "(?i:'s)", R"("Regex": "((?i:'s)"))
            .find(
                "pre_tokenizer.pretokenizers[0].pattern.Regex: PCRE2 cannot compile the pattern") !=
        std::string::npos);
    CHECK(load_error("bad_regex_word",
                     replaced(tiny, R"("Regex": "(?i:'s)", R"("Regex": "\\w+|(?i:'s)"))
              .find("pre_tokenizer.pretokenizers[0].pattern.Regex: the pattern '\\w+|(?i:'s") !=
          std::string::npos);
    CHECK(
        load_error("bad_decoder",
                   replaced(tiny, R"("decoder": {"type": "ByteLevel")",
                            R"("decoder": {"type": "WordPiece"}, "unused": {"type": "ByteLevel")"))
            .find("decoder: 'WordPiece' is not supported") != std::string::npos);
    CHECK(load_error("bad_no_model", replaced(tiny, R"("model": {)", R"("modelx": {)"))
              .find("model: missing") != std::string::npos);
  }
}

// ---- Against Hugging Face's tokenizers ----

namespace {

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string json_array_of_base64(const std::vector<std::string>& texts) {
  std::string out = "[";
  for (size_t i = 0; i < texts.size(); ++i) out += (i ? ",\"" : "\"") + base64(texts[i]) + "\"";
  return out + "]";
}

std::vector<std::vector<int32_t>> read_id_lines(const std::string& path) {
  std::vector<std::vector<int32_t>> lines;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    std::vector<int32_t> ids;
    std::istringstream numbers(line);
    for (int64_t id; numbers >> id;) ids.push_back(static_cast<int32_t>(id));
    lines.push_back(std::move(ids));
  }
  return lines;
}

// A text for messages: at most 80 bytes, control characters escaped.
std::string shown(std::string_view text) {
  std::string out;
  for (unsigned char c : text.substr(0, 80)) {
    if (c < 0x20 || c == 0x7F) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\x%02X", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (text.size() > 80 ? "…(" + std::to_string(text.size()) + " bytes)" : "");
}

// A folder of this test case's own for the reference's inputs and outputs.
std::string reference_dir() { return testing::scratch_dir("tokenizer_reference"); }

std::string node(const std::string& dir, const std::string& arguments) {
  return testing::run_tokenizer_reference(dir, arguments);
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// The varied text set; `invalid` holds texts that are not valid UTF-8 and what they read as.
struct TextSet {
  std::vector<std::string> texts;
  std::vector<std::pair<std::string, std::string>> invalid;
};

TextSet text_set() {
  TextSet set;
  std::vector<std::string>& t = set.texts;
  t = {
      "",
      " ",
      "\n",
      "a",
      "'",
      "Hello, world! This is a test.",
      "Crème brûlée, façade, naïve, Ångström, São Paulo, Żółć, Dvořák, İstanbul, straße, ÆØÅ æøå",
      "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. ΑΒΓΔ",
      "Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА ёлка",
      "مرحبا بالعالم! هذه جملة عربية، مع أرقام ١٢٣٤٥٦٧٨٩٠ وتشكيل: مَرْحَبًا",
      "שלום עולם, זהו משפט בעברית עם ניקוד: בְּרֵאשִׁית בָּרָא אֱלֹהִים",
      "नमस्ते दुनिया, यह हिन्दी का वाक्य है। क्षत्रिय ज्ञान ०१२३४५६७८९",
      "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ๑๒๓",
      "你好，世界！这是一个中文句子。日本語の文章です：ひらがな、カタカナ、漢字。",
      "안녕하세요 세계! 한국어 문장입니다. 한글 자모: ㄱㄴㄷ ㅏㅑ",
      "e\u0301 a\u0300\u0323 Z\u0324\u0354\u0367\u0311\u0313 n\u0303 \u0915\u094D\u0937 "
      "o\u0308\u0304 \u1100\u1161\u11A8 \u0041\u030A\u0301",
      "👋 Hello 🌍! 👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 🇫🇷🇯🇵🇺🇸 "
      "flags, "
      "👍🏽👍🏿 "
      "skin "
      "tones, "
      "❤️ ✨ 🧑🏻‍💻 #️⃣ 😀😃😄",
      "a  b   c\t\td\r\ne\n\n\nf \u00A0g\u3000h   \n  \t \r\n\r\n   i\u2028j\u2029k\u0085l end   ",
      "   leading spaces",
      "\n\nnewlines first\n",
      "\t\ttabs\tand\u000Bvertical\u000Cform feed",
      "1234567890123456789012345678901234567890",
      "3.14159 2,718 1,000,000.00 10.000,5 +49 (0)30 123-4567 2024-01-15T12:34:56Z 0x1F 1e-10 "
      "¹²³ ½ ⅓ Ⅻ ①②③ ٣٤٥ 12,345.67€ $1.5M 50%",
      "DON'T I'M We'Ll they'RE you'Ve she'D it'S don't can't won't I'm y'all O'Neil rock'n'roll "
      "don’t ’tis 'S 'T 'RE",
      "'ſ 'K 'ＳＴ İ'S 'ﬆ",
      "#include <vector>\nint main() {\n    std::vector<int> v{1, 2, 3};\n"
      "    for (auto& x : v) x *= 2;  // double\n    return v.size() > 2 ? 0 : 1;\n}\n",
      "def f(x: int) -> int:\n    \"\"\"Docstring.\"\"\"\n    if x <= 1:\n        return 1\n"
      "    return x * f(x - 1)  # recursion\n\nprint(f'{f(5)=}')\n",
      "<|begin_of_text|>Hello<|end_of_text|> and <|eot_id|>, <|start_header_id|>user"
      "<|end_header_id|>\n\n<|reserved_special_token_5|> <|not_a_token|> <|begin_of_text|",
      "<|begin_of_text|><|begin_of_text|>",
      "URLs: https://example.com/path?query=1&x=2#frag, email: a.b@c.org, C:\\Users\\x",
      "!!!??? ... --- *** ===>>> \"quoted\" 'single' (parens) [brackets] {braces} <tag/> </end>",
      "Kawi 𑼄𑼅, CJK Ext H 𱍐𱍑, Ext I 𮯰, Garay digits 𐵀𐵁, Kaktovik 𝋀𝋁, "
      "Todhri 𐗀",
      "\u180E\u180E1 a\u200Bb \uFEFFbom \u00AD soft hyphen \uFFFD replacement \U0010FFFF",
      std::string(1000, '9'),
      std::string(5000, ' ') + "x",
      std::string(20000, 'a'),
      std::string("a").append(3000, '\n').append("b"),
      std::string(300, '\t') + "tabs" + std::string(300, '\r'),
      std::string(2000, '!') + "word",
  };
  // A long text (> 100 KB) mixing all of the above, in an order drawn from a fixed LCG.
  std::string long_text;
  const std::vector<std::string> pieces(t.begin() + 5, t.begin() + 33);
  const char* separators[] = {" ", "\n", "\n\n", "\t", "", ". ", "\r\n"};
  uint64_t state = 12345;
  while (long_text.size() < 150 * 1024) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    long_text += pieces[(state >> 33) % pieces.size()];
    long_text += separators[(state >> 20) % 7];
  }
  t.push_back(long_text);

  const std::string fffd = "\xEF\xBF\xBD";
  set.invalid = {
      {"\xff", fffd},
      {"abc\x80"
       "def",
       "abc" + fffd + "def"},
      {"\xE2\x82"
       "A truncated",
       fffd + "A truncated"},
      {"\xC0\xAF overlong", fffd + fffd + " overlong"},
      {"\xED\xA0\x80 surrogate", fffd + fffd + fffd + " surrogate"},
      {"\xF4\x90\x80\x80 too big", fffd + fffd + fffd + fffd + " too big"},
      {"truncated at the end \xF0\x9F\x98", "truncated at the end " + fffd},
      {"\xF0\x9F\x98\x80 then \xF0\x9F \xFE\xFF",
       "\xF0\x9F\x98\x80 then " + fffd + " " + fffd + fffd},
      {"word\x80\x81\x82word", "word" + fffd + fffd + fffd + "word"},
  };
  return set;
}

// Compares our ids with HF's for every text; prints the first difference of each text.
void check_same_ids(const HfTokenizer& tokenizer, const std::vector<std::string>& texts,
                    const std::vector<std::vector<int32_t>>& reference, const std::string& what) {
  REQUIRE(reference.size() == texts.size());
  int identical = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ours = tokenizer.encode(texts[i]);
    if (ours == reference[i]) {
      ++identical;
      continue;
    }
    auto [ours_at, theirs_at] =
        std::mismatch(ours.begin(), ours.end(), reference[i].begin(), reference[i].end());
    size_t at = static_cast<size_t>(ours_at - ours.begin());
    FAIL_CHECK(what << ": text " << i << " '" << shown(texts[i]) << "': " << ours.size()
                    << " ids here, " << reference[i].size() << " from Hugging Face; first "
                    << "difference at id " << at << ": "
                    << (ours_at == ours.end() ? std::string("(end)") : std::to_string(*ours_at))
                    << " here, "
                    << (theirs_at == reference[i].end() ? std::string("(end)")
                                                        : std::to_string(*theirs_at))
                    << " from Hugging Face");
  }
  MESSAGE(what << ": " << identical << " of " << texts.size() << " texts give identical ids");
}

}  // namespace

TEST_SUITE("check node") {
  TEST_CASE("HfTokenizer: Llama 3's tokenizer.json token for token as Hugging Face's tokenizers") {
    std::string dir = reference_dir();
    std::string llama3 = trimmed(node(dir, "llama3"));
    auto tokenizer = HfTokenizer::load(llama3, "data.tokenizer_path");
    CHECK(tokenizer->vocab_size() == 128256);
    CHECK(tokenizer->bos_id() == 128000);
    CHECK(tokenizer->eos_id() == 128001);

    TextSet set = text_set();
    std::vector<std::string> texts = set.texts;
    for (const auto& [bytes, read_as] : set.invalid) texts.push_back(bytes);
    write_reference_text(dir + "/llama3_texts.json", json_array_of_base64(texts));
    node(dir, "encode '" + llama3 + "' llama3_texts.json llama3_ids.txt");
    check_same_ids(*tokenizer, texts, read_id_lines(dir + "/llama3_ids.txt"), "Llama 3");

    for (const std::string& text : set.texts) {
      CHECK_MESSAGE(tokenizer->decode(tokenizer->encode(text)) == text, "'" << shown(text) << "'");
    }
    for (const auto& [bytes, read_as] : set.invalid) {
      CHECK_MESSAGE(tokenizer->decode(tokenizer->encode(bytes)) == read_as,
                    "'" << shown(bytes) << "'");
    }
    // Llama 3 reads the special tokens inside a text as those tokens.
    CHECK(tokenizer->encode("a<|end_of_text|>b") == std::vector<int32_t>{64, 128001, 65});
  }

  TEST_CASE(
      "HfTokenizer: variants of Llama 3's file (merge spelling and template and GPT-2 "
      "pre-tokenizer and options)" * doctest::test_suite("matrix node")) {
    std::string dir = reference_dir();
    std::string llama3 = trimmed(node(dir, "llama3"));
    std::string variants_dir = dir + "/variants";
    std::istringstream names(node(dir, "variants '" + llama3 + "' '" + variants_dir + "'"));

    TextSet set = text_set();
    std::vector<std::string> texts = set.texts;
    for (const auto& [bytes, read_as] : set.invalid) texts.push_back(bytes);
    texts.push_back("hello world <mask>  [SEP] wor world<|end<|end_of_text|>  <mask>x");
    write_reference_text(dir + "/variant_texts.json", json_array_of_base64(texts));
    int variants = 0;
    for (std::string name; std::getline(names, name);) {
      ++variants;
      std::string file = variants_dir + "/" + name;
      std::string out = dir + "/variant_ids_" + name + ".txt";
      node(dir, "encode '" + file + "' variant_texts.json '" + out + "'");
      auto tokenizer = HfTokenizer::load(file, "data.tokenizer_path");
      check_same_ids(*tokenizer, texts, read_id_lines(out), name);
      if (name == "template.json") {  // HF's post-processor adds BOS, as encode_document does
        node(dir, "encode '" + file + "' variant_texts.json '" + out + ".document' --document");
        std::vector<std::vector<int32_t>> documents = read_id_lines(out + ".document");
        for (size_t i = 0; i < texts.size(); ++i) {
          std::vector<int32_t> ours = tokenizer->encode_document(texts[i]);
          REQUIRE(ours.back() == 128001);  // EOS, which HF's template does not add
          ours.pop_back();
          CHECK_MESSAGE(ours == documents[i], "text " << i);
        }
      }
    }
    CHECK(variants == 15);
  }

  TEST_CASE("HfTokenizer: every Unicode code point is split as Hugging Face splits it") {
    // Each code point c in a probe that meets each alternative of Llama 3's pattern: after a
    // letter, doubled (runs), before a digit, after a space, after an apostrophe, before a
    // newline. Compared piece for piece (where each piece ends, in code points).
    std::string dir = reference_dir();
    std::string llama3 = trimmed(node(dir, "llama3"));
    auto tokenizer = HfTokenizer::load(llama3, "data.tokenizer_path");
    std::vector<std::string> texts;
    std::string text;
    auto append_utf8 = [](std::string& out, char32_t c) {
      if (c < 0x80) {
        out += static_cast<char>(c);
      } else if (c < 0x800) {
        out += static_cast<char>(0xC0 | (c >> 6));
        out += static_cast<char>(0x80 | (c & 0x3F));
      } else if (c < 0x10000) {
        out += static_cast<char>(0xE0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
      }
    };
    int in_text = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c < 0xE000) continue;
      std::string ch;
      append_utf8(ch, c);
      text += "x" + ch + ch + "1" + ch + " " + ch + "'" + ch + "\n";
      if (++in_text == 4096) {
        texts.push_back(std::move(text));
        text.clear();
        in_text = 0;
      }
    }
    texts.push_back(std::move(text));
    write_reference_text(dir + "/code_points.json", json_array_of_base64(texts));
    node(dir, "pieces '" + llama3 + "' code_points.json code_point_pieces.txt");
    std::vector<std::vector<int32_t>> reference = read_id_lines(dir + "/code_point_pieces.txt");
    REQUIRE(reference.size() == texts.size());
    int identical = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<int32_t> ends;
      int32_t code_points = 0;
      for (const std::string& word : tokenizer->words(texts[i])) {
        for (unsigned char byte : word) code_points += (byte & 0xC0) != 0x80;
        ends.push_back(code_points);
      }
      if (ends == reference[i]) {
        ++identical;
        continue;
      }
      auto [ours, theirs] =
          std::mismatch(ends.begin(), ends.end(), reference[i].begin(), reference[i].end());
      size_t probe = ours == ends.end() ? 0 : static_cast<size_t>(*ours) / 9;  // 9 per probe
      FAIL_CHECK("code points from U+" << std::hex << (i * 4096) << std::dec << ": a piece ends at "
                                       << (ours == ends.end() ? -1 : *ours) << " here and at "
                                       << (theirs == reference[i].end() ? -1 : *theirs)
                                       << " in Hugging Face (near probe " << probe << ")");
    }
    MESSAGE(identical << " of " << texts.size() << " blocks of 4096 code points split identically");
  }
}

}  // namespace titan::data
