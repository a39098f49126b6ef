// titan_tokenize: turns a text file into a token file (data/token_file.h) with the byte-level
// tokenizer, so the binary path can be tried without a Python tokenizer.
//
//   titan_tokenize INPUT.txt OUTPUT.bin
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "data/byte_tokenizer.h"
#include "data/token_file.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: titan_tokenize INPUT.txt OUTPUT.bin\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "titan_tokenize: error: cannot read '%s'; give an existing text file\n",
                 argv[1]);
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    std::vector<int32_t> tokens = titan::data::ByteTokenizer().encode_document(text.str());
    titan::data::write_token_file(argv[2], tokens, titan::data::ByteTokenizer::kVocabSize, 2);
    std::printf("%s: %zu tokens (uint16, vocab %lld)\n", argv[2], tokens.size(),
                static_cast<long long>(titan::data::ByteTokenizer::kVocabSize));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_tokenize: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
