// Fuzz target: text through a Hugging Face tokenizer (data/hf_tokenizer.h: encode, decode,
// words), the text being the input. The tokenizer is made here once: Llama 3's pre-tokenizer
// (its Split regex, then ByteLevel), all 256 byte tokens, a few merges, and two special added
// tokens, so every text has an encoding.
//
// Contract: encode never throws; its ids are below vocab_size(); decode(encode(text)) is the
// text as a UTF-8 reader with replacement gives it (fuzz/utf8_oracle.h), and so is the
// concatenation of words(text): nothing is lost, duplicated or reordered.
#include <string>
#include <string_view>
#include <vector>

#include "core/json_text.h"
#include "data/hf_tokenizer.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/utf8_oracle.h"

using namespace titan;

namespace {

// GPT-2's byte-to-character table (byte-level BPE spells byte b as this character).
std::string byte_level_char(int b) {
  int code = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int n = 0;
    for (int c = 0; c < b; ++c) {
      if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) ++n;
    }
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

std::string tokenizer_json() {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(byte_level_char(b));
  const std::string space = byte_level_char(' ');
  const std::vector<std::pair<std::string, std::string>> merges = {
      {space, "t"}, {"h", "e"}, {space + "t", "he"}, {"i", "n"}, {space, "a"}, {"e", "r"},
      {space + "a", "n"}, {"o", "n"}, {space, space}, {"1", "2"}};
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  std::string json = R"({"version": "1.0", "added_tokens": [)";
  const int64_t n = static_cast<int64_t>(vocab.size());
  json += R"({"id": )" + std::to_string(n) +
          R"(, "content": "<|begin_of_text|>", "special": true, "normalized": false},)";
  json += R"({"id": )" + std::to_string(n + 1) +
          R"(, "content": "<|end_of_text|>", "special": true, "normalized": false}],)";
  json += R"("normalizer": null, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [)";
  json += R"({"type": "Split", "pattern": {"Regex": )";
  json += json_string(
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  json += R"(}, "behavior": "Isolated", "invert": false},)";
  json += R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, )"
          R"("use_regex": false}]},)";
  json += R"("post_processor": null, "decoder": {"type": "ByteLevel"},)";
  json += R"("model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false, )"
          R"("ignore_merges": false, "vocab": {)";
  for (size_t id = 0; id < vocab.size(); ++id) {
    json += (id ? ", " : "") + json_string(vocab[id]) + ": " + std::to_string(id);
  }
  json += "}, \"merges\": [";
  for (size_t i = 0; i < merges.size(); ++i) {
    json += (i ? ", " : "") + json_string(merges[i].first + " " + merges[i].second);
  }
  json += "]}}";
  return json;
}

const data::HfTokenizer& tokenizer() {
  static const std::unique_ptr<data::HfTokenizer> loaded = [] {
    const std::string json = tokenizer_json();
    const std::string path = fuzz::write_scratch_file("tokenizer.json", json.data(), json.size());
    return data::HfTokenizer::load(path, "fuzz");
  }();
  return *loaded;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const data::HfTokenizer& t = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string expected = fuzz::utf8_replaced(text);

  std::vector<int32_t> ids;
  FUZZ_REQUIRE(fuzz::fuzz_reads("HfTokenizer::encode", [&] { ids = t.encode(text); }),
               "HfTokenizer::encode", "refused a text");
  for (int32_t id : ids) {
    FUZZ_REQUIRE(id >= 0 && id < t.vocab_size(), "HfTokenizer::encode",
                 "id " + std::to_string(id) + " outside the vocabulary");
  }
  std::string decoded;
  FUZZ_REQUIRE(fuzz::fuzz_reads("HfTokenizer::decode", [&] { decoded = t.decode(ids); }),
               "HfTokenizer::decode", "refused ids its own encode() gave");
  FUZZ_REQUIRE(decoded == expected, "HfTokenizer", "decode(encode(text)) is not the text");

  std::string joined;
  for (const std::string& word : t.words(text)) joined += word;
  FUZZ_REQUIRE(joined == expected, "HfTokenizer::words", "the words do not make up the text");
  return 0;
}
