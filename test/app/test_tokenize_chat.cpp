// titan_tokenize --chat end to end: conversations packed whole into blocks of --seq-len (each
// block starts a conversation or is padding, no conversation crosses a block), the loss mask in
// bit 31 of each token, the header's window and flag, the summary line; a conversation longer
// than a block refused or truncated; the flags --chat needs; titan_train's refusal of another
// seq_len.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/tokenizer_reference.h"

using namespace titan::testing;

namespace tokenize_chat_test {

struct ChatFile {
  uint32_t version = 0;
  uint64_t window = 0, flags = 0;
  std::vector<uint32_t> tokens;
};

ChatFile read_chat_file(const std::string& path) {
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 64);
  ChatFile f;
  uint64_t count = 0;
  std::memcpy(&f.version, bytes.data() + 8, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  std::memcpy(&f.window, bytes.data() + 32, 8);
  std::memcpy(&f.flags, bytes.data() + 40, 8);
  REQUIRE(bytes.size() == 64 + count * 4);
  f.tokens.resize(count);
  std::memcpy(f.tokens.data(), bytes.data() + 64, count * 4);
  return f;
}

std::string write_chats(const std::string& dir, int count, int answer_words) {
  const std::string path = dir + "/chats.jsonl";
  std::ofstream out(path);
  for (int c = 0; c < count; ++c) {
    std::string answer;
    for (int w = 0; w < answer_words * (1 + c % 3); ++w) answer += " word";
    out << "{\"messages\": [{\"role\": \"user\", \"content\": \"question " << c
        << "\"}, {\"role\": \"assistant\", \"content\": \"" << answer << "\"}]}\n";
  }
  return path;
}

constexpr uint32_t kUntrained = 0x80000000u;
constexpr uint32_t kBos = 128000, kEos = 128001;


TEST_SUITE("check node") {
  TEST_CASE("titan_tokenize --chat packs whole conversations into blocks with the loss mask") {
    const std::string dir = scratch_dir("tokenize_chat");
    const std::string tokenizer = llama3_tokenizer_json();
    const std::string chats = write_chats(dir, 40, 4);
    const ProcessResult r = run_process(binary_path("titan_tokenize") + " --chat --tokenizer '" +
                                        tokenizer + "' --seq-len 64 " + chats + " " + dir +
                                        "/chats.bin");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    MESSAGE(r.out);
    CHECK(r.out.find("40 conversations in") != std::string::npos);
    const ChatFile f = read_chat_file(dir + "/chats.bin");
    CHECK(f.version == 2);
    CHECK(f.window == 64);
    CHECK(f.flags == 1);
    REQUIRE(f.tokens.size() % 64 == 1);  // whole blocks, then the last window's extra target
    int64_t conversations = 0, trained = 0;
    for (size_t block = 0; block * 64 < f.tokens.size() - 1; ++block) {
      const uint32_t first = f.tokens[block * 64] & ~kUntrained;
      CHECK_MESSAGE((first == kBos || first == kEos), "block " << block << " starts with " << first);
      bool padding = false;
      for (size_t i = block * 64; i < block * 64 + 64; ++i) {
        const uint32_t id = f.tokens[i] & ~kUntrained;
        const bool untrained = (f.tokens[i] & kUntrained) != 0;
        if (id == kBos) {
          CHECK_MESSAGE(!padding, "a conversation starts in block " << block << "'s padding");
          ++conversations;
        }
        // Padding runs to the block's end: an EOS followed by another EOS.
        if (id == kEos && i + 1 < block * 64 + 64 && (f.tokens[i + 1] & ~kUntrained) == kEos) {
          padding = true;
        }
        if (padding) CHECK((id == kEos && untrained));
        if (id == kBos || id == kEos) CHECK(untrained);
        trained += untrained ? 0 : 1;
      }
    }
    CHECK(conversations == 40);
    CHECK(r.out.find(std::to_string(trained) + " of them trained on") != std::string::npos);

    // titan_train reads it in the windows it was packed for, and no others.
    const ProcessResult wrong =
        run_process(binary_path("titan_train") + " --config configs/debug_model.yaml "
                    "--training.steps 1 --training.seq_len 32 --data.path " + dir + "/chats.bin");
    CHECK(wrong.exit_code == 2);
    CHECK(wrong.err.find("holds conversations packed into windows of 64 tokens, and training.seq_len is 32") != std::string::npos);
  }

  TEST_CASE("titan_tokenize --chat refuses a conversation longer than the window unless told to truncate") {
    const std::string dir = scratch_dir("tokenize_chat_long");
    const std::string tokenizer = llama3_tokenizer_json();
    const std::string chats = write_chats(dir, 3, 40);
    const std::string base = binary_path("titan_tokenize") + " --chat --tokenizer '" + tokenizer +
                             "' --seq-len 32 " + chats + " " + dir + "/out.bin";
    const ProcessResult refused = run_process(base);
    CHECK(refused.exit_code == 2);
    CHECK(refused.err.find("line 1: the conversation is") != std::string::npos);
    CHECK(refused.err.find("longer than a window of --seq-len 32") != std::string::npos);
    const ProcessResult truncated = run_process(base + " --chat-overflow truncate");
    REQUIRE_MESSAGE(truncated.exit_code == 0, truncated.err);
    CHECK(truncated.out.find("3 truncated to the window") != std::string::npos);
  }
}

TEST_SUITE("check") {
  TEST_CASE("titan_tokenize --chat needs one .bin output and a --seq-len and a tokenizer with Llama 3's tokens") {
    const std::string dir = scratch_dir("tokenize_chat_flags");
    const std::string chats = write_chats(dir, 2, 2);
    const ProcessResult folder = run_process(binary_path("titan_tokenize") + " --chat --seq-len 64 " + chats + " " + dir + "/shards");
    CHECK(folder.exit_code == 2);
    CHECK(folder.err.find("--chat writes one token file") != std::string::npos);
    const ProcessResult no_len = run_process(binary_path("titan_tokenize") + " --chat " + chats + " " + dir + "/x.bin");
    CHECK(no_len.exit_code == 2);
    CHECK(no_len.err.find("--chat packs conversations into windows of --seq-len tokens, and none is given") != std::string::npos);
    const ProcessResult byte = run_process(binary_path("titan_tokenize") + " --chat --seq-len 64 " + chats + " " + dir + "/x.bin");
    CHECK(byte.exit_code == 2);
    CHECK(byte.err.find("has no token <|begin_of_text|>, which Llama 3's chat format needs") != std::string::npos);
  }
}

}  // namespace tokenize_chat_test
