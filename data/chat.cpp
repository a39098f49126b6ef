#include "data/chat.h"

#include <array>

#include "core/check.h"
#include "core/json_reader.h"

namespace titan::data {

namespace {

// The code points Python's str.isspace() is true of (unicodedata's bidirectional classes WS,
// B and S, and the Zs category): what str.strip() with no argument removes.
bool python_space(uint32_t c) {
  constexpr std::array<uint32_t, 13> kSingles = {0x1C,   0x1D,   0x1E,   0x1F,   0x20,
                                                  0x85,   0xA0,   0x1680, 0x2028, 0x2029,
                                                  0x202F, 0x205F, 0x3000};
  if (c >= 0x09 && c <= 0x0D) return true;
  if (c >= 0x2000 && c <= 0x200A) return true;
  for (uint32_t s : kSingles) {
    if (c == s) return true;
  }
  return false;
}

// The code point starting at text[i] and its length; an invalid byte counts as one, not space.
std::pair<uint32_t, size_t> decode_at(std::string_view text, size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return {0xFFFFFFFF, 1};
  uint32_t c = n == 1 ? b : b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto cont = static_cast<unsigned char>(text[i + k]);
    if ((cont >> 6) != 0x2) return {0xFFFFFFFF, 1};
    c = (c << 6) | (cont & 0x3F);
  }
  return {c, n};
}

int32_t special_token(const Tokenizer& tokenizer, std::string_view text, const std::string& key) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  if (ids.size() != 1) {
    input_error(key, ": the tokenizer (", tokenizer.describe(), ") has no token ", text,
                ", which Llama 3's chat format needs; use Llama 3's tokenizer.json");
  }
  return ids[0];
}

}  // namespace

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    const auto [c, n] = decode_at(text, begin);
    if (!python_space(c)) break;
    begin += n;
  }
  // From the end: step back over continuation bytes to each code point's start.
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) >> 6) == 0x2) --start;
    const auto [c, n] = decode_at(text, start);
    if (start + n != end || !python_space(c)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::vector<ChatMessage> parse_conversation(std::string_view line, const std::string& where) {
  JsonDocument document;
  if (!document.parse(line)) {
    input_error(where, ": not JSON (", document.error_phrase(),
                "); each line must be one JSON object, a conversation {\"messages\": [...]}");
  }
  const std::optional<JsonObject> object = document.root().get_object();
  if (!object) {
    input_error(where, ": is ", document.root().type_name(),
                ", not a JSON object; each line must be one conversation {\"messages\": [...]}");
  }
  const std::optional<JsonValue> list = object->find("messages");
  if (!list || !list->get_array()) {
    input_error(where, ": messages: ", list ? "is not a list" : "missing",
                "; a conversation is {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}");
  }
  const JsonArray array = *list->get_array();  // held: the loop must not iterate a temporary
  std::vector<ChatMessage> messages;
  bool answered = false;
  size_t index = 0;
  for (const JsonValue m : array) {
    const std::string at = detail::concat(where, ": messages[", index++, "]");
    const std::optional<JsonObject> message = m.get_object();
    if (!message) input_error(at, ": is ", m.type_name(), ", not an object {\"role\", \"content\"}");
    auto text = [&](std::string_view key) {
      const std::optional<JsonValue> value = message->find(key);
      if (!value) input_error(at, ".", key, ": missing; every message has a role and a content");
      const std::optional<std::string_view> s = value->get_string();
      if (!s) input_error(at, ".", key, ": is ", value->type_name(), ", not a string");
      return std::string(*s);
    };
    ChatMessage chat{text("role"), text("content")};
    if (chat.role != "system" && chat.role != "user" && chat.role != "assistant") {
      input_error(at, ".role: unknown role '", chat.role,
                  "'; Llama 3's chat format takes system, user and assistant");
    }
    answered = answered || chat.role == "assistant";
    messages.push_back(std::move(chat));
  }
  if (!answered) {
    input_error(where, ": messages: no assistant message, so nothing to train on; give each "
                "conversation at least one answer, or leave it out");
  }
  return messages;
}

ChatTokens llama3_chat_tokens(const Tokenizer& tokenizer, const std::string& key) {
  ChatTokens t;
  t.begin_of_text = special_token(tokenizer, "<|begin_of_text|>", key);
  t.start_header = special_token(tokenizer, "<|start_header_id|>", key);
  t.end_header = special_token(tokenizer, "<|end_header_id|>", key);
  t.eot = special_token(tokenizer, "<|eot_id|>", key);
  t.end_of_text = special_token(tokenizer, "<|end_of_text|>", key);
  return t;
}

RenderedChat render_llama3_chat(const std::vector<ChatMessage>& messages,
                                const Tokenizer& tokenizer, const ChatTokens& tokens) {
  RenderedChat out;
  auto append = [&out](const std::vector<int32_t>& ids, bool trained) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.trained.insert(out.trained.end(), ids.size(), trained ? 1 : 0);
  };
  const std::vector<int32_t> blank = tokenizer.encode("\n\n");
  append({tokens.begin_of_text}, false);
  for (const ChatMessage& m : messages) {
    const bool answer = m.role == "assistant";
    append({tokens.start_header}, false);
    append(tokenizer.encode(m.role), false);
    append({tokens.end_header}, false);
    // "\n\n" and the content are one piece of text between two special tokens: encoded
    // together, as Hugging Face encodes the rendered string. The answer is what follows the
    // ids of "\n\n" (they stay apart: the pre-tokenizer cuts newlines from letters).
    std::string body = "\n\n";
    body += python_strip(m.content);
    const std::vector<int32_t> ids = tokenizer.encode(body);
    const bool separate = ids.size() >= blank.size() &&
                          std::equal(blank.begin(), blank.end(), ids.begin());
    const size_t header = separate ? blank.size() : 0;
    append(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<int64_t>(header)), false);
    append(std::vector<int32_t>(ids.begin() + static_cast<int64_t>(header), ids.end()), answer);
    append({tokens.eot}, answer);
  }
  append({tokens.end_of_text}, false);
  return out;
}

}  // namespace titan::data
