// JsonDocument refuses an object that holds a key twice, for every reader at once: which of the
// two a reader takes is an accident of its parser (simdjson's at_key() the first, Python's json
// the last). The message names the key, the object's path and where both keys are in the text.
#include <doctest/doctest.h>

#include <string>

#include "core/json_reader.h"

using namespace titan;

namespace {

// The error of parsing `text` (through the kept text and through a view, the two ways readers
// parse), or "" when it parses; both ways must agree.
std::string parse_error(const std::string& text) {
  JsonDocument kept;
  kept.set_text(text);
  const bool kept_ok = kept.parse();
  JsonDocument viewed;
  const bool viewed_ok = viewed.parse(std::string_view(text));
  REQUIRE(kept_ok == viewed_ok);
  if (kept_ok) return "";
  CHECK(std::string(kept.error()) == viewed.error());
  CHECK(kept.error_phrase() == kept.error());
  return kept.error();
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("JSON: a key given twice is refused — naming the key and the object and both places") {
    CHECK(parse_error(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]})") == "");
    CHECK(parse_error(
              "{\n  \"rope_theta\": 500000.0,\n  \"dim\": 4,\n  \"rope_theta\": 10000.0\n}") ==
          "the key \"rope_theta\" appears twice in the top-level object, at line 2 column 3 "
          "(byte 4) and line 4 column 3 (byte 42); readers differ on which one counts, so keep "
          "one");
    // Nested: the object's path, through members and array elements.
    const std::string nested =
        parse_error(R"({"files": [{"name": "a"}, {"name": "b", "bytes": 1, "name": "c"}]})");
    CHECK(nested.find("the key \"name\" appears twice in files[1], at line 1 column 28 (byte 27) "
                      "and line 1 column 53 (byte 52)") == 0);
    // A key spelled with an escape is the same key.
    CHECK(parse_error(R"({"ab": 1, "\u0061b": 2})").find("the key \"ab\" appears twice") == 0);
  }

  TEST_CASE("JSON: in an object of many members the first repeated pair is named") {
    // 40 members (hashed, not compared pair by pair), "k7" again at member 30 and "k3" at 35:
    // the pair whose second member comes first is k7's.
    std::string text = "{";
    for (int i = 0; i < 40; ++i) {
      const int key = i == 30 ? 7 : i == 35 ? 3 : i;
      text += (i ? "," : "") + std::string("\"k") + std::to_string(key) + "\":" + std::to_string(i);
    }
    text += "}";
    const std::string error = parse_error(text);
    CHECK(error.find("the key \"k7\" appears twice in the top-level object") == 0);
    const size_t first = text.find("\"k7\""), second = text.find("\"k7\"", first + 1);
    CHECK(error.find("(byte " + std::to_string(first) + ") and line 1 column " +
                     std::to_string(second + 1) + " (byte " + std::to_string(second) + ")") !=
          std::string::npos);
  }

  TEST_CASE("JSON: a key found twice is shown on one line — escaped and cut short") {
    const std::string error = parse_error("{\"a\\nb\": 1, \"a\\nb\": 2}");
    CHECK(error.find("the key \"a\\nb\" appears twice") == 0);
    CHECK(error.find('\n') == std::string::npos);
    const std::string long_key(500, 'x');
    const std::string long_error =
        parse_error("{\"" + long_key + "\": 1, \"" + long_key + "\": 2}");
    CHECK(long_error.find("\"" + std::string(80, 'x') + "\"…") != std::string::npos);
    CHECK(long_error.size() < 300);
  }

  TEST_CASE("JSON: a document parsed again forgets the last one's key found twice") {
    JsonDocument document;
    CHECK_FALSE(document.parse(std::string_view(R"({"a": 1, "a": 2})")));
    REQUIRE(document.parse(std::string_view(R"({"a": 1})")));
    CHECK(document.root().get_object()->size() == 1);
    CHECK_FALSE(document.parse(std::string_view("{")));
    CHECK(std::string(document.error()).find("appears twice") == std::string::npos);
  }
}
