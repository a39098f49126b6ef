#include "fuzz/json_key_oracle.h"

#include <simdjson.h>

#include <set>
#include <string>

namespace titan::fuzz {

namespace {

bool holds_key_twice(simdjson::ondemand::value value) {
  simdjson::ondemand::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  if (type == simdjson::ondemand::json_type::object) {
    simdjson::ondemand::object object;
    if (value.get_object().get(object) != simdjson::SUCCESS) return false;
    std::set<std::string> keys;
    for (auto member : object) {
      simdjson::ondemand::field field;
      if (std::move(member).get(field) != simdjson::SUCCESS) return false;
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      if (!keys.insert(std::string(key)).second) return true;
      if (holds_key_twice(field.value())) return true;
    }
  } else if (type == simdjson::ondemand::json_type::array) {
    simdjson::ondemand::array array;
    if (value.get_array().get(array) != simdjson::SUCCESS) return false;
    for (auto element : array) {
      simdjson::ondemand::value item;
      if (std::move(element).get(item) != simdjson::SUCCESS) return false;
      if (holds_key_twice(item)) return true;
    }
  }
  return false;
}

}  // namespace

bool json_holds_key_twice(std::string_view json) {
  const simdjson::padded_string padded(json);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document document;
  if (parser.iterate(padded).get(document) != simdjson::SUCCESS) return false;
  simdjson::ondemand::value root;
  if (document.get_value().get(root) != simdjson::SUCCESS) return false;
  return holds_key_twice(root);
}

}  // namespace titan::fuzz
