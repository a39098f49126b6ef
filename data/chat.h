// Conversations in Llama 3's chat format, and which of their tokens a fine-tune trains on.
//
// A conversation is one JSON line with a list of messages, the layout of Hugging Face chat
// datasets (other fields are ignored):
//
//   {"messages": [{"role": "system", "content": "…"}, {"role": "user", "content": "…"},
//                 {"role": "assistant", "content": "…"}, …]}
//
// rendered as Llama 3's chat template renders it (the chat_template of its tokenizer_config.json):
//
//   <|begin_of_text|>
//   for each message:  <|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>
//
// then <|end_of_text|>, which ends the conversation as a document (the boundary block_causal
// attention reads) where the template would go on to a generation prompt. Jinja's trim is
// Python's str.strip(): Unicode whitespace at both ends. The special tokens are the tokenizer's
// own, by their text; the rest is encoded as Hugging Face encodes the rendered text (each piece
// between two special tokens on its own, since added tokens are cut out first).
//
// Trained on: each assistant message's content and the <|eot_id|> that closes it, as targets;
// nothing else (system and user turns, every header, the "\n\n" after a header, BOS, EOS) — the
// loss on the answers that torchtitan's chat dataset and Hugging Face's assistant mask give.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace titan::data {

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// InputError naming `where` ("--chat 'chats.jsonl' line 7") and the field: a line that is not
// JSON or not an object, no "messages" list, a message that is not an object, a missing or
// non-string "role" or "content", a role other than system, user and assistant, and a
// conversation with no assistant message (it would train on nothing).
std::vector<ChatMessage> parse_conversation(std::string_view line, const std::string& where);

// The special tokens of the format, looked up by their text; InputError naming `key` (what
// chose the tokenizer) when the tokenizer lacks one, as the byte tokenizer does.
struct ChatTokens {
  int32_t begin_of_text = 0, start_header = 0, end_header = 0, eot = 0, end_of_text = 0;
};
ChatTokens llama3_chat_tokens(const Tokenizer& tokenizer, const std::string& key);

struct RenderedChat {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;  // [ids.size()]: 1 where the loss predicts this token
};
RenderedChat render_llama3_chat(const std::vector<ChatMessage>& messages,
                                const Tokenizer& tokenizer, const ChatTokens& tokens);

// Python's str.strip(): the whitespace code points at both ends of UTF-8 text removed.
std::string_view python_strip(std::string_view text);

}  // namespace titan::data
