// Conversations in Llama 3's chat format (data/chat.h): 20 conversations rendered by real Jinja
// from the chat template Llama 3's tokenizer_config.json carries and encoded by Hugging Face's
// own tokenizers give titan's ids, and the trained tokens are exactly the answers and their
// <|eot_id|>; Python's strip; every refusal of a conversation line.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/chat.h"
#include "data/hf_tokenizer.h"
#include "support/input_error.h"
#include "support/process.h"
#include "support/tokenizer_reference.h"

using namespace titan;
using namespace titan::data;

namespace chat_test {

// A JSON string literal of `text` (UTF-8 kept as is).
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

std::string conversation_line(const std::vector<ChatMessage>& messages) {
  std::string line = "{\"messages\": [";
  for (size_t i = 0; i < messages.size(); ++i) {
    line += (i ? ", " : "") + std::string("{\"role\": ") + json_string(messages[i].role) +
            ", \"content\": " + json_string(messages[i].content) + "}";
  }
  return line + "]}";
}

// 20 conversations: with a system prompt or not, one to four exchanges, contents to trim,
// Unicode, newlines inside, an empty answer, text that looks like markup.
std::vector<std::vector<ChatMessage>> conversations() {
  const std::vector<std::string> questions = {
      "What is the capital of France?", "  Spaces around  ", "Écris « bonjour » en grec.",
      "日本語で数を数えて", "Line one\nline two\n\nline four", "Emoji? 🙂👍🏽",
      "Sum 2+2 and explain\tbriefly.", "Quote: \"to be\" or not", "<b>bold</b> & [brackets]",
      "Zero-width\u200bjoiner and NBSP\u00a0here"};
  const std::vector<std::string> answers = {
      "Paris.", "\n  trimmed both ends \n", "καλημέρα", "一、二、三", "Line A\n\nLine B",
      "🙂", "4, since two and two make four.", "", "OK: <i>x</i>", " done\u3000"};
  std::vector<std::vector<ChatMessage>> out;
  for (int c = 0; c < 20; ++c) {
    std::vector<ChatMessage> m;
    if (c % 3 == 0) m.push_back({"system", c % 2 ? "You answer briefly." : " Be kind.\n"});
    const int turns = 1 + c % 4;
    for (int t = 0; t < turns; ++t) {
      m.push_back({"user", questions[(c + t) % questions.size()]});
      m.push_back({"assistant", answers[(c * 3 + t) % answers.size()]});
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::vector<int32_t>> read_id_lines(const std::string& path) {
  std::vector<std::vector<int32_t>> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<int32_t> ids;
    std::istringstream numbers(line);
    for (int32_t id; numbers >> id;) ids.push_back(id);
    lines.push_back(std::move(ids));
  }
  return lines;
}


TEST_SUITE("check node python") {
  TEST_CASE("chat: 20 conversations render as Jinja renders Llama 3's template and HF encodes it") {
    const std::string tokenizer_json = testing::llama3_tokenizer_json();
    const std::string config =
        (std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json").string();
    const std::unique_ptr<HfTokenizer> tokenizer = HfTokenizer::load(tokenizer_json, "test");
    const ChatTokens tokens = llama3_chat_tokens(*tokenizer, "test");
    CHECK(tokens.begin_of_text == 128000);
    CHECK(tokens.eot == 128009);

    const std::string dir = testing::scratch_dir("chat_reference");
    const std::vector<std::vector<ChatMessage>> chats = conversations();
    {
      std::ofstream out(dir + "/chats.jsonl");
      for (const auto& chat : chats) out << conversation_line(chat) << "\n";
    }
    const testing::ProcessResult rendered =
        testing::run_process("/usr/bin/python3 " + testing::source_path("test/data/chat_reference.py") +
                             " '" + config + "' " + dir + "/chats.jsonl " + dir + "/rendered.json");
    REQUIRE_MESSAGE(rendered.exit_code == 0, rendered.err);
    testing::run_tokenizer_reference(
        dir, "encode '" + tokenizer_json + "' rendered.json reference_ids.txt");
    const std::vector<std::vector<int32_t>> reference = read_id_lines(dir + "/reference_ids.txt");
    REQUIRE(reference.size() == chats.size());

    std::ifstream lines(dir + "/chats.jsonl");
    int64_t trained_total = 0;
    for (size_t c = 0; c < chats.size(); ++c) {
      std::string line;
      std::getline(lines, line);
      const RenderedChat ours = render_llama3_chat(parse_conversation(line, "chats.jsonl"),
                                                   *tokenizer, tokens);
      REQUIRE(ours.ids.back() == tokens.end_of_text);  // the document's end, past the template
      const std::vector<int32_t> rendered_ids(ours.ids.begin(), ours.ids.end() - 1);
      CHECK_MESSAGE(rendered_ids == reference[c], "conversation " << c);
      // The trained tokens, in order, are each answer stripped, then <|eot_id|>.
      std::vector<int32_t> trained;
      for (size_t i = 0; i < ours.ids.size(); ++i) {
        if (ours.trained[i]) trained.push_back(ours.ids[i]);
      }
      std::string expected;
      for (const ChatMessage& m : chats[c]) {
        if (m.role == "assistant") expected += std::string(python_strip(m.content)) + "<|eot_id|>";
      }
      CHECK_MESSAGE(tokenizer->decode(trained) == expected, "conversation " << c);
      trained_total += static_cast<int64_t>(trained.size());
    }
    MESSAGE("20 conversations: " << trained_total << " trained tokens");
  }
}

TEST_SUITE("fast") {
  TEST_CASE("chat: python_strip removes Unicode whitespace at both ends as str.strip() does") {
    CHECK(python_strip("  a b\t\n") == "a b");
    CHECK(python_strip("\u00a0\u3000x\u2009") == "x");
    CHECK(python_strip("\u200bx") == "\u200bx");  // zero-width space is not whitespace
    CHECK(python_strip("\x1c\x85?") == "\x85?");  // U+001C is space; a lone byte 0x85 is no U+0085
    CHECK(python_strip("\xc2\x85x\x1f") == "x");
    CHECK(python_strip("") == "");
    CHECK(python_strip(" \n ") == "");
    CHECK(python_strip("\xff ") == "\xff");  // an invalid byte is kept
  }

  TEST_CASE("chat: every malformed conversation is refused naming the line and the field") {
    const std::string where = "--chat 'c.jsonl' line 3";
    auto refused = [&](const std::string& line, const std::string& fragment) {
      const std::string message =
          testing::input_error_message([&] { parse_conversation(line, where); });
      CHECK_MESSAGE(message.find(where) != std::string::npos, message);
      CHECK_MESSAGE(message.find(fragment) != std::string::npos, message);
    };
    refused("{not json", "not JSON");
    refused("[1, 2]", "not a JSON object");
    refused("{\"conversation\": []}", "messages: missing");
    refused("{\"messages\": {}}", "messages: is not a list");
    refused("{\"messages\": [3]}", "messages[0]: is");
    refused("{\"messages\": [{\"content\": \"hi\"}]}", "messages[0].role: missing");
    refused("{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content: missing");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": 7}]}",
            "messages[0].content: is");
    refused("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}",
            "messages[0].role: unknown role 'tool'; Llama 3's chat format takes system, user and assistant");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
            "no assistant message, so nothing to train on");
    CHECK(parse_conversation("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\"}], "
                             "\"id\": 4}",
                             where)
              .size() == 1);
  }
}

}  // namespace chat_test
