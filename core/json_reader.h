// Reading JSON that comes from outside (a tokenizer.json, a Hugging Face config.json or index,
// a safetensors header, a checkpoint's metadata.json, a line of a JSON lines corpus) with
// simdjson, and saying exactly where a problem is.
//
// Two layers:
//   JsonDocument, JsonValue, JsonObject, JsonArray   a parsed document and typed access that
//       answers a mismatch with nullopt, for a reader that has its own words for each problem
//       (the safetensors header, a corpus line);
//   JsonReader   the same access, failing with one InputError line that names the file, the
//       JSON path and what was expected:
//           <file>: <path>: expected an integer<fix>
//       where <file> is how the caller names the file ("checkpoint: /ckpt/step-2/metadata.json",
//       "data.tokenizer_path: 'tok.json'") and <fix> what to do about it, if one fix fits all.
//
// simdjson stays inside json_reader.cpp: core's headers reach every file of the project, .cu
// files included, and simdjson's single header is 1.2 MB of templates.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/check.h"

namespace titan {

class JsonArray;
class JsonObject;

namespace json_detail {
template <class Item>
class Iterator;
// Room for one of simdjson's DOM handles (an element, object, array or iterator: a document
// pointer and a tape index), which json_reader.cpp checks at compile time.
struct Handle {
  alignas(8) unsigned char bytes[16];
};
}  // namespace json_detail

// One value of a JsonDocument, valid while the document lives and has not parsed again.
class JsonValue {
 public:
  bool is_null() const;
  // "an object", "an array", "a number", "a string", "a boolean" or "null", for messages.
  const char* type_name() const;

  std::optional<JsonObject> get_object() const;
  std::optional<JsonArray> get_array() const;
  std::optional<std::string_view> get_string() const;  // a view into the document
  std::optional<int64_t> get_int64() const;             // an integer that fits int64
  std::optional<uint64_t> get_uint64() const;           // a non-negative integer that fits uint64
  std::optional<double> get_double() const;             // any number
  std::optional<bool> get_bool() const;

 private:
  friend class JsonArray;
  friend class JsonDocument;
  friend class JsonObject;
  template <class Item>
  friend class json_detail::Iterator;
  explicit JsonValue(json_detail::Handle handle) : handle_(handle) {}
  json_detail::Handle handle_;
};

struct JsonMember {
  std::string_view key;
  JsonValue value;
};

namespace json_detail {
// An iterator over an object's members (Item = JsonMember) or an array's values
// (Item = JsonValue); json_reader.cpp instantiates both.
template <class Item>
class Iterator {
 public:
  Item operator*() const;
  Iterator& operator++();
  bool operator==(const Iterator& other) const;

 private:
  friend class titan::JsonArray;
  friend class titan::JsonObject;
  explicit Iterator(Handle handle) : handle_(handle) {}
  Handle handle_;
};
extern template class Iterator<JsonMember>;
extern template class Iterator<JsonValue>;
}  // namespace json_detail

class JsonObject {
 public:
  using iterator = json_detail::Iterator<JsonMember>;
  iterator begin() const;
  iterator end() const;
  size_t size() const;
  // The value of `key`, or nullopt when the object has no such key (a null value is present).
  std::optional<JsonValue> find(std::string_view key) const;

 private:
  friend class JsonValue;
  explicit JsonObject(json_detail::Handle handle) : handle_(handle) {}
  json_detail::Handle handle_;
};

class JsonArray {
 public:
  using iterator = json_detail::Iterator<JsonValue>;
  iterator begin() const;
  iterator end() const;
  size_t size() const;
  JsonValue at(size_t index) const;  // index < size()

 private:
  friend class JsonValue;
  explicit JsonArray(json_detail::Handle handle) : handle_(handle) {}
  json_detail::Handle handle_;
};

// A JSON text and its parse. Parsing again (another line) invalidates the values of the last.
class JsonDocument {
 public:
  JsonDocument();
  ~JsonDocument();
  JsonDocument(const JsonDocument&) = delete;
  JsonDocument& operator=(const JsonDocument&) = delete;

  // Reads the file at `path` as the text. False when it cannot be read (error() says why).
  bool load(const std::string& path);
  // Room for a text of `bytes` bytes, for the caller to fill (with a pread, say) before parse().
  char* text_buffer(size_t bytes);
  // `text`, copied, as the text.
  void set_text(std::string_view text);
  // Parses the text loaded, filled or set. False when it is not JSON, or when an object holds
  // a key twice, which JSON leaves each reader to settle its own way (error() says which key,
  // where the object is and where both keys are in the text).
  bool parse();
  // Parses `text` without keeping it (a line of a JSON lines file): one document reused line
  // after line costs no allocation once its buffers have grown. False as parse() is.
  bool parse(std::string_view text);

  JsonValue root() const;  // after a parse that succeeded
  // Why the last load or parse failed, in simdjson's words (a sentence), or the key found twice.
  const char* error() const;
  // The same as a phrase, for a report that lists many lines: "a bad number".
  std::string error_phrase() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Typed access that fails with one InputError line:  <file>: <path>: <what><fix>.
class JsonReader {
 public:
  // How one kind of file words its messages.
  struct Style {
    std::string fix;                  // after every message ("" for none)
    std::string missing = "missing";  // what a required key that is absent is called
    bool say_found = false;           // "expected an object, found an array"
    bool null_is_absent = false;      // a key holding null counts as absent (HF's optional keys)
  };

  explicit JsonReader(std::string file) : file_(std::move(file)) {}
  JsonReader(std::string file, Style style) : file_(std::move(file)), style_(std::move(style)) {}
  // How messages name the file.
  const std::string& file() const { return file_; }

  template <class... Args>
  [[noreturn]] void fail(std::string_view path, Args&&... what) const {
    input_error(file_, ": ", path, ": ", std::forward<Args>(what)..., style_.fix);
  }
  // A problem of the whole file (not JSON, say): <file>: <what><fix>.
  template <class... Args>
  [[noreturn]] void fail_file(Args&&... what) const {
    input_error(file_, ": ", std::forward<Args>(what)..., style_.fix);
  }

  // `key` of `object`, or nullopt when absent (or null, with Style::null_is_absent).
  std::optional<JsonValue> member(JsonObject object, std::string_view key) const;
  // `key` of `object`, or fails at `path` (the key's own path) with Style::missing.
  JsonValue required(JsonObject object, std::string_view key, std::string_view path) const;

  JsonObject object(JsonValue value, std::string_view path) const;
  JsonArray array(JsonValue value, std::string_view path) const;
  std::string_view string(JsonValue value, std::string_view path) const;
  // An integer in [lo, hi]; a number wider than int64 is refused as such.
  int64_t integer(JsonValue value, std::string_view path, int64_t lo = INT64_MIN,
                  int64_t hi = INT64_MAX) const;
  double number(JsonValue value, std::string_view path) const;
  bool boolean(JsonValue value, std::string_view path) const;
  // An optional boolean key: `otherwise` when absent.
  bool boolean(JsonObject object, std::string_view key, std::string_view path,
               bool otherwise) const;

  // Required keys whose path is <where>.<key>.
  int64_t integer_at(JsonObject object, std::string_view key, std::string_view where,
                     int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  double number_at(JsonObject object, std::string_view key, std::string_view where) const;

 private:
  [[noreturn]] void expected(JsonValue value, std::string_view path, std::string_view what) const;
  // *found, or "expected <what>" at `path`.
  template <class T>
  T typed(std::optional<T> found, JsonValue value, std::string_view path,
          std::string_view what) const;

  std::string file_;
  Style style_;
};

// "<path>[<i>]", the path of an array's element.
std::string json_index_path(std::string_view path, size_t i);

}  // namespace titan
