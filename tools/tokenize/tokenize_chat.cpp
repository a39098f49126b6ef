#include "tools/tokenize/tokenize_chat.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <fstream>

#include "core/check.h"
#include "data/chat.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace titan::tokenize {

namespace {

struct Block {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
};

}  // namespace

ChatSummary tokenize_chat(const ChatOptions& o) {
  TT_CHECK(o.seq_len > 0, "tokenize_chat: seq_len ", o.seq_len);
  const std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(o.tokenizer, "--tokenizer");
  const data::ChatTokens tokens = data::llama3_chat_tokens(*tokenizer, "--tokenizer");
  ChatSummary summary;
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;
  std::deque<Block> open;  // oldest first
  auto close_oldest = [&] {
    Block& b = open.front();
    summary.padding_tokens += o.seq_len - static_cast<int64_t>(b.ids.size());
    b.ids.resize(static_cast<size_t>(o.seq_len), tokens.end_of_text);
    b.trained.resize(static_cast<size_t>(o.seq_len), 0);
    ids.insert(ids.end(), b.ids.begin(), b.ids.end());
    trained.insert(trained.end(), b.trained.begin(), b.trained.end());
    ++summary.blocks;
    open.pop_front();
  };
  for (const std::string& path : o.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) input_error("--chat: cannot read '", path, "'; name a JSON lines file of conversations");
    std::string line;
    int64_t number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (data::python_strip(line).empty()) continue;
      const std::string where = detail::concat("--chat '", path, "' line ", number);
      data::RenderedChat chat =
          data::render_llama3_chat(data::parse_conversation(line, where), *tokenizer, tokens);
      const auto length = static_cast<int64_t>(chat.ids.size());
      if (length > o.seq_len) {
        if (o.overflow == ChatOverflow::Refuse) {
          input_error(where, ": the conversation is ", length, " tokens, longer than a window of ",
                      "--seq-len ", o.seq_len, "; raise --seq-len, or cut such conversations ",
                      "with --chat-overflow truncate");
        }
        chat.ids.resize(static_cast<size_t>(o.seq_len));
        chat.trained.resize(static_cast<size_t>(o.seq_len));
        ++summary.truncated;
      }
      ++summary.conversations;
      for (uint8_t t : chat.trained) summary.trained_tokens += t;
      const size_t n = chat.ids.size();
      auto fits = [&](const Block& b) { return b.ids.size() + n <= static_cast<size_t>(o.seq_len); };
      auto it = std::find_if(open.begin(), open.end(), fits);
      if (it == open.end()) {
        if (static_cast<int64_t>(open.size()) == kOpenBlocks) close_oldest();
        open.emplace_back();
        it = std::prev(open.end());
      }
      it->ids.insert(it->ids.end(), chat.ids.begin(), chat.ids.end());
      it->trained.insert(it->trained.end(), chat.trained.begin(), chat.trained.end());
    }
  }
  if (summary.conversations == 0) {
    input_error("--chat: no conversation in ", o.inputs.size() == 1 ? "'" + o.inputs[0] + "'" : "the inputs",
                "; give JSON lines of {\"messages\": [...]}");
  }
  while (!open.empty()) close_oldest();
  // The last window's extra target.
  ids.push_back(tokens.end_of_text);
  trained.push_back(0);
  ++summary.padding_tokens;
  summary.tokens = static_cast<int64_t>(ids.size());
  data::write_masked_token_file(o.output, ids, trained, tokenizer->vocab_size(), o.seq_len);
  return summary;
}

std::string describe_chat_summary(const ChatSummary& s, int64_t seq_len) {
  return detail::concat(s.conversations, " conversations in ", s.blocks, " blocks of ", seq_len,
                        " tokens, packed first-fit: ", s.tokens, " tokens, ", s.trained_tokens,
                        " of them trained on (the answers), ", s.padding_tokens, " padding; ",
                        s.truncated, " truncated to the window");
}

}  // namespace titan::tokenize
