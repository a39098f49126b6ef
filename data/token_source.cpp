#include "data/token_source.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "data/byte_tokenizer.h"
#include "data/corpus_files.h"
#include "data/token_file.h"
#include "data/token_shards.h"

namespace titan::data {

namespace {

// A text file tokenized at open time: a few bytes per token, held in memory.
class TextTokens final : public TokenSource {
 public:
  TextTokens(std::string path, std::vector<int32_t> tokens, int64_t vocab_size,
             std::string tokenizer)
      : path_(std::move(path)),
        tokens_(std::move(tokens)),
        vocab_size_(vocab_size),
        tokenizer_(std::move(tokenizer)) {}

  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t vocab_bound() const override { return vocab_size_; }
  void read(int64_t start, int64_t count, int32_t* dst) const override {
    TT_CHECK(start >= 0 && count >= 0 && start + count <= size(), "text tokens read [", start, ", ",
             start + count, ") outside ", size(), " tokens");
    std::memcpy(dst, tokens_.data() + start, static_cast<size_t>(count) * sizeof(int32_t));
  }
  std::string describe() const override {
    return detail::concat(path_, " (text, ", tokenizer_, ", ", size(), " tokens)");
  }

 private:
  std::string path_;
  std::vector<int32_t> tokens_;
  int64_t vocab_size_;
  std::string tokenizer_;
};

std::unique_ptr<TokenSource> open_text(const std::string& path, const std::string& key,
                                       const Tokenizer& tokenizer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    input_error(key, ": cannot read '", path, "': ", std::strerror(errno), "; point ", key,
                " at a readable text file");
  }
  std::stringstream text;
  text << in.rdbuf();
  return std::make_unique<TextTokens>(path, tokenizer.encode_document(text.str()),
                                      tokenizer.vocab_size(), tokenizer.describe());
}

// A corpus titan_tokenize reads (JSON lines, Parquet, anything compressed) is refused as text:
// read as one text document its bytes would be trained on, braces, page headers and all.
void refuse_untokenized_corpus(const std::string& path, const std::string& key) {
  const CorpusFile file = classify_corpus_file(path, 0);
  if (file.format == CorpusFormat::TEXT && file.compression == Compression::NONE) return;
  std::filesystem::path out = std::filesystem::path(path).filename();
  while (out.has_extension()) out = out.stem();
  const std::string folder =
      (std::filesystem::path(path).parent_path() / (out.string() + "_tokens")).string();
  input_error(key, ": '", path, "' is ", describe_corpus_file(file),
              ", which would be trained on as raw bytes; tokenize it first with titan_tokenize "
              "[--tokenizer TOKENIZER.json] '",
              path, "' '", folder, "' and set ", key, " to '", folder, "'");
}

}  // namespace

TokenFormat resolve_token_format(const std::string& path, TokenFormat format) {
  if (format != TokenFormat::Auto) return format;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) && names_token_shards(path)) {
    return TokenFormat::Bin;
  }
  return std::filesystem::path(path).extension() == ".bin" ? TokenFormat::Bin : TokenFormat::Text;
}

std::unique_ptr<TokenSource> open_token_source(const TokenSourceSpec& spec,
                                               const Tokenizer* tokenizer) {
  const std::string& path = spec.path;
  const std::string& key = spec.path_key;
  if (path.empty()) {
    input_error(key,
                ": no data given; set it to a text file, a .bin token file, a folder of .bin "
                "shards or a glob of them",
                key == "data.path"
                    ? " (scripts/setup.sh writes the default corpus, corpus/kjv.txt)"
                    : "");
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) && names_token_shards(path)) {
    if (spec.format == TokenFormat::Text) {
      input_error(key, ": '", path, "' names .bin shards (a folder or a glob), but ",
                  spec.format_key, " is text, which reads one text file; use ", spec.format_key,
                  " auto or bin");
    }
    return open_token_shards(path, key);
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    input_error(key, ": '", path, "' ",
                std::filesystem::exists(path, ec) ? "is not a regular file" : "does not exist",
                key == "data.path"
                    ? "; run scripts/setup.sh to write the default corpus (corpus/kjv.txt) or "
                      "point data.path at"
                    : "; point " + key + " at",
                " a text file, a .bin token file, a folder of .bin shards or a glob of them");
  }
  if (resolve_token_format(path, spec.format) == TokenFormat::Bin) {
    return open_token_file(path, key);
  }
  refuse_untokenized_corpus(path, key);
  if (tokenizer != nullptr) return open_text(path, key, *tokenizer);
  return open_text(path, key, ByteTokenizer());
}

}  // namespace titan::data
