// Fuzz target: a tokenizer.json (data/hf_tokenizer.h: HfTokenizer::load), then the tokenizer
// it gives on a few fixed texts.
//
// Contract: load returns or throws InputError, and never accepts a file holding a key twice
// (json_key_oracle.h). A loaded tokenizer encodes any text (valid UTF-8
// or not; InputError is the one refusal allowed) into ids below vocab_size() that decode() takes
// back without throwing; its BOS and EOS ids, when it has them, are below vocab_size().
#include <string>
#include <string_view>
#include <vector>

#include "data/hf_tokenizer.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/json_key_oracle.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch_file("tokenizer.json", data, size);
  std::unique_ptr<data::HfTokenizer> tokenizer;
  if (!fuzz::fuzz_reads("HfTokenizer::load",
                        [&] { tokenizer = data::HfTokenizer::load(path, "fuzz"); })) {
    return 0;
  }
  FUZZ_REQUIRE(
      !fuzz::json_holds_key_twice(std::string_view(reinterpret_cast<const char*>(data), size)),
      "HfTokenizer::load", "accepted a tokenizer.json holding a key twice");
  const int64_t vocab = tokenizer->vocab_size();
  FUZZ_REQUIRE(vocab > 0 && vocab <= (int64_t{1} << 24), "HfTokenizer::load",
               "vocab_size " + std::to_string(vocab));
  for (std::optional<int32_t> id : {tokenizer->bos_id(), tokenizer->eos_id()}) {
    FUZZ_REQUIRE(!id || (*id >= 0 && *id < vocab), "HfTokenizer::load",
                 "BOS/EOS id " + std::to_string(id.value_or(0)) + " outside the vocabulary");
  }
  static const std::vector<std::string_view> texts = {
      "",
      "Hello, world! It's 2024: 12345 tokens.\n\n  indented\tand <s></s><|end_of_text|>",
      "abc ab bc ca a b c \r\n x<s>x",
      "\xC3\xBC\x6E\xC3\xAF\x63\xC3\xB6\x64\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80",
      "\xFF\xFE bad \xC3 utf \xED\xA0\x80 8 \xF4\x90\x80\x80",
  };
  for (std::string_view text : texts) {
    std::vector<int32_t> ids;
    fuzz::fuzz_reads("HfTokenizer::encode", [&] { ids = tokenizer->encode(text); });
    for (int32_t id : ids) {
      FUZZ_REQUIRE(id >= 0 && id < vocab, "HfTokenizer::encode",
                   "id " + std::to_string(id) + " outside the vocabulary");
    }
    FUZZ_REQUIRE(fuzz::fuzz_reads("HfTokenizer::decode", [&] { tokenizer->decode(ids); }),
                 "HfTokenizer::decode", "refused ids its own encode() gave");
  }
  return 0;
}
