// titan_tokenize --chat: JSON lines of conversations (data/chat.h) into one token file of
// conversations with a loss mask (data/token_file.h, version 2), packed for training windows.
//
// Each conversation is rendered in Llama 3's chat format and kept whole: conversations are
// packed first-fit into blocks of --seq-len tokens (each into the first open block with room
// for it, among the last kOpenBlocks opened, so that memory stays bounded on any corpus), and a
// block's unused tail is <|end_of_text|> padding, trained on by no one. A training window of
// seq_len + 1 tokens from token i·seq_len is then block i and the first token of block i + 1 (a
// BOS or padding, never a target the loss covers), so each window holds its conversations as
// they were packed. A conversation longer than a block is refused (exit 2, naming its line and
// length), or with --chat-overflow truncate cut to the block's length and counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::tokenize {

inline constexpr int64_t kOpenBlocks = 256;

enum class ChatOverflow { Refuse, Truncate };

struct ChatOptions {
  std::vector<std::string> inputs;  // JSON lines files
  std::string output;               // one .bin
  std::string tokenizer;            // data::load_tokenizer's spec; Llama 3's
  int64_t seq_len = 0;              // the block: training.seq_len of the runs that read it
  ChatOverflow overflow = ChatOverflow::Refuse;
};

struct ChatSummary {
  int64_t conversations = 0, truncated = 0, blocks = 0;
  int64_t tokens = 0;          // in the file, padding included
  int64_t trained_tokens = 0;  // targets the loss covers
  int64_t padding_tokens = 0;
};

ChatSummary tokenize_chat(const ChatOptions& options);

// "12,345 conversations in 678 blocks of 2048 tokens: …", the line titan_tokenize prints.
std::string describe_chat_summary(const ChatSummary& summary, int64_t seq_len);

}  // namespace titan::tokenize
