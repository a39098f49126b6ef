#include "core/json_reader.h"

#include <simdjson.h>

#include <cstring>
#include <type_traits>

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

// ---- JsonDocument ------------------------------------------------------------------------------

struct JsonDocument::Impl {
  dom::parser parser;
  simdjson::padded_string text;
  dom::element root;
  simdjson::error_code error = simdjson::SUCCESS;
};

JsonDocument::JsonDocument() : impl_(std::make_unique<Impl>()) {}
JsonDocument::~JsonDocument() = default;

bool JsonDocument::load(const std::string& path) {
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
  return impl_->error == simdjson::SUCCESS;
}

bool JsonDocument::parse(std::string_view text) {
  impl_->error = impl_->parser.parse(text.data(), text.size()).get(impl_->root);
  return impl_->error == simdjson::SUCCESS;
}

JsonValue JsonDocument::root() const {
  TT_CHECK(impl_->error == simdjson::SUCCESS, "JsonDocument::root() of a failed parse");
  return JsonValue(wrap(impl_->root));
}

const char* JsonDocument::error() const { return simdjson::error_message(impl_->error); }

std::string JsonDocument::error_phrase() const {
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
