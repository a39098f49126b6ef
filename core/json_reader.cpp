#include "core/json_reader.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/json_text.h"

namespace titan {

namespace dom = simdjson::dom;

namespace {

// Every DOM handle is a document pointer and a tape index, copied freely by simdjson itself.
template <class T>
json_detail::Handle wrap(const T& value) {
  static_assert(sizeof(T) <= sizeof(json_detail::Handle) &&
                    alignof(T) <= alignof(json_detail::Handle) &&
                    std::is_trivially_copyable_v<T>,
                "json_detail::Handle cannot hold this simdjson type");
  json_detail::Handle handle{};
  std::memcpy(handle.bytes, &value, sizeof(T));
  return handle;
}

template <class T>
T unwrap(const json_detail::Handle& handle) {
  T value;
  std::memcpy(static_cast<void*>(&value), handle.bytes, sizeof(T));
  return value;
}

dom::element element(const json_detail::Handle& handle) { return unwrap<dom::element>(handle); }

}  // namespace

// ---- JsonValue ---------------------------------------------------------------------------------

bool JsonValue::is_null() const { return element(handle_).is_null(); }

const char* JsonValue::type_name() const {
  switch (element(handle_).type()) {
    case dom::element_type::ARRAY: return "an array";
    case dom::element_type::OBJECT: return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
    case dom::element_type::DOUBLE: return "a number";
    case dom::element_type::STRING: return "a string";
    case dom::element_type::BOOL: return "a boolean";
    case dom::element_type::NULL_VALUE: return "null";
  }
  return "a value";
}

namespace {

// The value as simdjson's T, or nullopt when it is not one.
template <class T>
std::optional<T> get_as(const json_detail::Handle& handle) {
  T out{};
  if (element(handle).get(out) != simdjson::SUCCESS) return std::nullopt;
  return out;
}

}  // namespace

std::optional<JsonObject> JsonValue::get_object() const {
  const std::optional<dom::object> out = get_as<dom::object>(handle_);
  return out ? std::optional<JsonObject>(JsonObject(wrap(*out))) : std::nullopt;
}

std::optional<JsonArray> JsonValue::get_array() const {
  const std::optional<dom::array> out = get_as<dom::array>(handle_);
  return out ? std::optional<JsonArray>(JsonArray(wrap(*out))) : std::nullopt;
}

std::optional<std::string_view> JsonValue::get_string() const {
  return get_as<std::string_view>(handle_);
}
std::optional<int64_t> JsonValue::get_int64() const { return get_as<int64_t>(handle_); }
std::optional<uint64_t> JsonValue::get_uint64() const { return get_as<uint64_t>(handle_); }
std::optional<double> JsonValue::get_double() const { return get_as<double>(handle_); }
std::optional<bool> JsonValue::get_bool() const { return get_as<bool>(handle_); }

// ---- JsonObject, JsonArray ---------------------------------------------------------------------

namespace json_detail {

// simdjson's iterator under Iterator<Item>.
template <class Item>
using DomIterator =
    std::conditional_t<std::is_same_v<Item, JsonMember>, dom::object::iterator, dom::array::iterator>;

template <class Item>
Item Iterator<Item>::operator*() const {
  const auto it = unwrap<DomIterator<Item>>(handle_);
  if constexpr (std::is_same_v<Item, JsonMember>) {
    return JsonMember{it.key(), JsonValue(wrap(it.value()))};
  } else {
    return JsonValue(wrap(*it));
  }
}

template <class Item>
Iterator<Item>& Iterator<Item>::operator++() {
  auto it = unwrap<DomIterator<Item>>(handle_);
  ++it;
  handle_ = wrap(it);
  return *this;
}

template <class Item>
bool Iterator<Item>::operator==(const Iterator& other) const {
  return unwrap<DomIterator<Item>>(handle_) == unwrap<DomIterator<Item>>(other.handle_);
}

template class Iterator<JsonMember>;
template class Iterator<JsonValue>;

}  // namespace json_detail

JsonObject::iterator JsonObject::begin() const {
  return iterator(wrap(unwrap<dom::object>(handle_).begin()));
}

JsonObject::iterator JsonObject::end() const {
  return iterator(wrap(unwrap<dom::object>(handle_).end()));
}

size_t JsonObject::size() const { return unwrap<dom::object>(handle_).size(); }

std::optional<JsonValue> JsonObject::find(std::string_view key) const {
  dom::element value;
  if (unwrap<dom::object>(handle_).at_key(key).get(value) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  return JsonValue(wrap(value));
}

JsonArray::iterator JsonArray::begin() const {
  return iterator(wrap(unwrap<dom::array>(handle_).begin()));
}

JsonArray::iterator JsonArray::end() const {
  return iterator(wrap(unwrap<dom::array>(handle_).end()));
}

size_t JsonArray::size() const { return unwrap<dom::array>(handle_).size(); }

JsonValue JsonArray::at(size_t index) const {
  dom::element value;
  const simdjson::error_code error = unwrap<dom::array>(handle_).at(index).get(value);
  TT_CHECK(error == simdjson::SUCCESS, "JsonArray::at(", index, ") of ", size());
  return JsonValue(wrap(value));
}

// ---- Duplicate keys ----------------------------------------------------------------------------
//
// JSON leaves an object whose key appears twice to the reader (RFC 8259, 4: "the behavior of
// software that receives such an object is unpredictable"): simdjson's at_key() returns the
// first, Python's json the last. A file that two tools read differently is refused, here, once
// for every reader: a parse that succeeded walks the document's objects, and the first key
// found twice fails the parse. Locating the two keys in the text is the rare path: it iterates
// the text again with simdjson's On-Demand API, whose keys point into it.

namespace {

// One step from the root to a value: member `index` of an object, or element `index` of an
// array.
struct PathStep {
  bool member = false;
  size_t index = 0;
  std::string_view key;  // a member's key
};

struct Duplicate {
  std::vector<PathStep> path;  // to the object holding the key twice
  std::string key;
  size_t first = 0, second = 0;  // the members' indices in that object
};

// Objects of at most this many members are compared pair by pair; larger ones are hashed.
constexpr size_t kPairwiseMembers = 16;

class DuplicateFinder {
 public:
  // The first object (in document order) holding a key twice, and its earliest repeated pair.
  std::optional<Duplicate> find(dom::element root) {
    path_.clear();
    found_.reset();
    visit(root);
    return std::move(found_);
  }

 private:
  void visit(dom::element value) {
    if (found_) return;
    dom::object object;
    if (value.get(object) == simdjson::SUCCESS) {
      check(object);
      size_t i = 0;
      for (const dom::key_value_pair member : object) {
        if (found_) return;
        path_.push_back({true, i++, member.key});
        visit(member.value);
        path_.pop_back();
      }
      return;
    }
    dom::array array;
    if (value.get(array) == simdjson::SUCCESS) {
      size_t i = 0;
      for (const dom::element element : array) {
        if (found_) return;
        path_.push_back({false, i++, {}});
        visit(element);
        path_.pop_back();
      }
    }
  }

  void check(dom::object object) {
    const size_t n = object.size();
    if (n < 2) return;
    keys_.clear();
    size_t i = 0;
    for (const dom::key_value_pair member : object) keys_.emplace_back(member.key, i++);
    // The repeated pair whose second member comes first.
    size_t first = n, second = n;
    std::string_view key;
    if (n <= kPairwiseMembers) {
      for (size_t b = 1; b < n && second == n; ++b) {
        for (size_t a = 0; a < b; ++a) {
          if (keys_[a].first == keys_[b].first) {
            first = a;
            second = b;
            key = keys_[a].first;
            break;
          }
        }
      }
    } else {
      // In member order: the first key already seen ends the search.
      seen_.clear();
      seen_.reserve(n);
      for (const auto& [name, index] : keys_) {
        const auto [it, added] = seen_.emplace(name, index);
        if (!added) {
          first = it->second;
          second = index;
          key = name;
          break;
        }
      }
    }
    if (second < n) found_ = Duplicate{path_, std::string(key), first, second};
  }

  std::vector<PathStep> path_;
  std::vector<std::pair<std::string_view, size_t>> keys_;  // scratch: an object's keys
  std::unordered_map<std::string_view, size_t> seen_;      // scratch: a large object's keys
  std::optional<Duplicate> found_;
};

// "the top-level object", or the path to the object: model.vocab, files[2].
std::string object_path(const std::vector<PathStep>& path) {
  if (path.empty()) return "the top-level object";
  std::string out;
  for (const PathStep& step : path) {
    if (step.member) {
      if (!out.empty()) out += '.';
      out += step.key;
    } else {
      out += '[';
      out += std::to_string(step.index);
      out += ']';
    }
  }
  return out;
}

// Where in `text` the keys of members `first` and `second` of the object at `path` begin (the
// byte of their opening quote); nullopt if the text does not iterate as the DOM did.
std::optional<std::pair<size_t, size_t>> key_offsets(std::string_view text, const Duplicate& d) {
  const simdjson::padded_string padded(text);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document document;
  if (parser.iterate(padded).get(document) != simdjson::SUCCESS) return std::nullopt;
  simdjson::ondemand::value value;
  if (document.get_value().get(value) != simdjson::SUCCESS) return std::nullopt;
  for (const PathStep& step : d.path) {
    bool reached = false;
    size_t i = 0;
    if (step.member) {
      simdjson::ondemand::object object;
      if (value.get_object().get(object) != simdjson::SUCCESS) return std::nullopt;
      for (auto member : object) {
        simdjson::ondemand::field field;
        if (std::move(member).get(field) != simdjson::SUCCESS) return std::nullopt;
        if (i++ == step.index) {
          value = field.value();
          reached = true;
          break;
        }
      }
    } else {
      simdjson::ondemand::array array;
      if (value.get_array().get(array) != simdjson::SUCCESS) return std::nullopt;
      for (auto element : array) {
        if (i++ == step.index) {
          if (std::move(element).get(value) != simdjson::SUCCESS) return std::nullopt;
          reached = true;
          break;
        }
      }
    }
    if (!reached) return std::nullopt;
  }
  simdjson::ondemand::object object;
  if (value.get_object().get(object) != simdjson::SUCCESS) return std::nullopt;
  std::optional<size_t> first;
  size_t i = 0;
  for (auto member : object) {
    simdjson::ondemand::field field;
    if (std::move(member).get(field) != simdjson::SUCCESS) return std::nullopt;
    // raw() points just past the key's opening quote, inside `padded`.
    const size_t at = static_cast<size_t>(field.key().raw() - padded.data()) - 1;
    if (i == d.first) first = at;
    if (i++ == d.second && first) return std::pair{*first, at};
  }
  return std::nullopt;
}

// "line 3 column 5 (byte 41)", 1-based line and column, 0-based byte.
std::string text_position(std::string_view text, size_t at) {
  const std::string_view before = text.substr(0, at);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = before.rfind('\n');
  const size_t column = at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  return "line " + std::to_string(line) + " column " + std::to_string(column) + " (byte " +
         std::to_string(at) + ")";
}

// The sentence JsonDocument::error() gives for a key found twice.
std::string duplicate_message(std::string_view text, const Duplicate& d) {
  // A key can be anything a file holds: quoted and escaped, and cut short, to stay one line.
  constexpr size_t kShownKeyBytes = 80;
  std::string key = json_string(d.key.substr(0, kShownKeyBytes));
  if (d.key.size() > kShownKeyBytes) key += "…";
  std::string where;
  if (const std::optional<std::pair<size_t, size_t>> at = key_offsets(text, d)) {
    where = ", at " + text_position(text, at->first) + " and " + text_position(text, at->second);
  } else {
    where = " (members " + std::to_string(d.first) + " and " + std::to_string(d.second) + ")";
  }
  return "the key " + key + " appears twice in " + object_path(d.path) + where +
         "; readers differ on which one counts, so keep one";
}

}  // namespace

// ---- JsonDocument ------------------------------------------------------------------------------

struct JsonDocument::Impl {
  dom::parser parser;
  simdjson::padded_string text;
  dom::element root;
  simdjson::error_code error = simdjson::SUCCESS;
  DuplicateFinder duplicates;
  std::string duplicate;  // the last parse's key found twice, as a sentence; "" when none

  // After simdjson's parse of `json`: whether it succeeded and holds no key twice.
  bool finish_parse(std::string_view json) {
    duplicate.clear();
    if (error != simdjson::SUCCESS) return false;
    if (const std::optional<Duplicate> found = duplicates.find(root)) {
      duplicate = duplicate_message(json, *found);
      return false;
    }
    return true;
  }
};

JsonDocument::JsonDocument() : impl_(std::make_unique<Impl>()) {}
JsonDocument::~JsonDocument() = default;

bool JsonDocument::load(const std::string& path) {
  impl_->duplicate.clear();
  impl_->error = simdjson::padded_string::load(path).get(impl_->text);
  return impl_->error == simdjson::SUCCESS;
}

char* JsonDocument::text_buffer(size_t bytes) {
  impl_->text = simdjson::padded_string(bytes);
  return impl_->text.data();
}

void JsonDocument::set_text(std::string_view text) {
  impl_->text = simdjson::padded_string(text);
}

bool JsonDocument::parse() {
  impl_->error = impl_->parser.parse(impl_->text).get(impl_->root);
  return impl_->finish_parse(std::string_view(impl_->text.data(), impl_->text.size()));
}

bool JsonDocument::parse(std::string_view text) {
  impl_->error = impl_->parser.parse(text.data(), text.size()).get(impl_->root);
  return impl_->finish_parse(text);
}

JsonValue JsonDocument::root() const {
  TT_CHECK(impl_->error == simdjson::SUCCESS && impl_->duplicate.empty(),
           "JsonDocument::root() of a failed parse");
  return JsonValue(wrap(impl_->root));
}

const char* JsonDocument::error() const {
  if (!impl_->duplicate.empty()) return impl_->duplicate.c_str();
  return simdjson::error_message(impl_->error);
}

std::string JsonDocument::error_phrase() const {
  if (!impl_->duplicate.empty()) return impl_->duplicate;
  switch (impl_->error) {
    case simdjson::TAPE_ERROR:
      return "bad structure: a comma, brace, bracket, quote or key missing or extra";
    case simdjson::DEPTH_ERROR: return "nested too deeply";
    case simdjson::STRING_ERROR: return "a bad string escape";
    case simdjson::T_ATOM_ERROR:
    case simdjson::F_ATOM_ERROR:
    case simdjson::N_ATOM_ERROR: return "a bad literal (true, false or null)";
    case simdjson::NUMBER_ERROR: return "a bad number";
    case simdjson::UTF8_ERROR: return "not valid UTF-8";
    case simdjson::UNESCAPED_CHARS: return "a control character not escaped in a string";
    case simdjson::UNCLOSED_STRING: return "a string not closed";
    default: return simdjson::error_message(impl_->error);
  }
}

// ---- JsonReader --------------------------------------------------------------------------------

void JsonReader::expected(JsonValue value, std::string_view path, std::string_view what) const {
  if (style_.say_found) fail(path, "expected ", what, ", found ", value.type_name());
  fail(path, "expected ", what);
}

template <class T>
T JsonReader::typed(std::optional<T> found, JsonValue value, std::string_view path,
                    std::string_view what) const {
  if (!found) expected(value, path, what);
  return *found;
}

std::optional<JsonValue> JsonReader::member(JsonObject object, std::string_view key) const {
  std::optional<JsonValue> value = object.find(key);
  if (value && style_.null_is_absent && value->is_null()) return std::nullopt;
  return value;
}

JsonValue JsonReader::required(JsonObject object, std::string_view key,
                               std::string_view path) const {
  std::optional<JsonValue> value = member(object, key);
  if (!value) fail(path, style_.missing);
  return *value;
}

JsonObject JsonReader::object(JsonValue value, std::string_view path) const {
  return typed(value.get_object(), value, path, "an object");
}

JsonArray JsonReader::array(JsonValue value, std::string_view path) const {
  return typed(value.get_array(), value, path, "an array");
}

std::string_view JsonReader::string(JsonValue value, std::string_view path) const {
  return typed(value.get_string(), value, path, "a string");
}

int64_t JsonReader::integer(JsonValue value, std::string_view path, int64_t lo,
                            int64_t hi) const {
  std::optional<int64_t> out = value.get_int64();
  if (!out) {
    if (std::optional<uint64_t> big = value.get_uint64()) {
      fail(path, *big, " overflows a 64-bit integer");
    }
    expected(value, path, "an integer");
  }
  if (*out < lo || *out > hi) fail(path, *out, " is out of range [", lo, ", ", hi, "]");
  return *out;
}

double JsonReader::number(JsonValue value, std::string_view path) const {
  return typed(value.get_double(), value, path, "a number");
}

bool JsonReader::boolean(JsonValue value, std::string_view path) const {
  return typed(value.get_bool(), value, path, "true or false");
}

bool JsonReader::boolean(JsonObject object, std::string_view key, std::string_view path,
                         bool otherwise) const {
  std::optional<JsonValue> value = member(object, key);
  return value ? boolean(*value, path) : otherwise;
}

int64_t JsonReader::integer_at(JsonObject object, std::string_view key, std::string_view where,
                               int64_t lo, int64_t hi) const {
  const std::string path = std::string(where) + "." + std::string(key);
  return integer(required(object, key, path), path, lo, hi);
}

double JsonReader::number_at(JsonObject object, std::string_view key,
                             std::string_view where) const {
  const std::string path = std::string(where) + "." + std::string(key);
  return number(required(object, key, path), path);
}

std::string json_index_path(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

}  // namespace titan
