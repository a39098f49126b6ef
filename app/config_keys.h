// The key table: every key of JobConfig is one row — its section and name, the field it sets,
// its help, its allowed values when it is enum-like (the names table of the layer that owns its
// type), and its single-key check. Everything that reads keys walks this table: the YAML reader
// and writer, the command line and --help, validation, docs/config.md.
//
// The default is not a column: it is the field's initialiser in config.h, written once there.
// That way a JobConfig{} is a whole, valid config for every caller (the trainer, tests, the
// fuzzers) without going through the table, and whatever prints a default (--help, the
// reference) reads it from a default-constructed JobConfig, so the two cannot disagree.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "app/config.h"
#include "core/enum_names.h"

namespace YAML {
class Node;
}

namespace titan::app {

// A single-key check: InputError naming `key`, the value and the fix when `value` is refused.
template <typename T>
using KeyCheck = std::function<void(const std::string& key, const T& value)>;

// An enum-like key's field behind the names of its values.
struct ChoiceRef {
  std::string_view noun;                // what a value is: "mode" in "unknown mode 'x'"
  std::vector<std::string_view> names;  // every allowed value, in its table's order
  // Sets the field from a name; InputError naming `key` and listing `names` for any other text.
  std::function<void(std::string_view text, const std::string& key)> set;
  std::function<std::string()> text;  // the field's name
};

// A list of named paths (data.sources, validation.sources): YAML's list of maps, or the same
// as flow YAML on the command line ("[{name: web, path: data/web, weight: 3}]").
struct SourceListRef {
  std::vector<SourceEntry>* list;
  bool weighted;  // entries carry a weight (data.sources); else `weight` is an unknown field
};

using ConfigValueRef =
    std::variant<int64_t*, double*, bool*, std::string*, std::vector<std::string>*,
                 std::optional<double>*, ChoiceRef, SourceListRef,
                 std::vector<model::ParamGroupRule>*>;

struct ConfigKey {
  template <typename T>
  ConfigKey(std::string section, std::string name, T* field, std::string help,
            std::type_identity_t<KeyCheck<T>> check = {})
      : section(std::move(section)), name(std::move(name)), help(std::move(help)), value(field) {
    if (check) {
      this->check = [field, check, path = path()] { check(path, *field); };
    }
  }
  // An enum-like key: its values are the names of `names`.
  template <typename E>
  ConfigKey(std::string section, std::string name, E* field, const EnumNames<E>& names,
            std::string help)
      : section(std::move(section)),
        name(std::move(name)),
        help(std::move(help)),
        value(ChoiceRef{names.noun(), names.names(),
                        [field, names](std::string_view text, const std::string& key) {
                          *field = names.parse(text, key);
                        },
                        [field, names] { return std::string(names.name(*field)); }}) {}
  // A device: cpu, cuda or cuda:N (core/device.h).
  ConfigKey(std::string section, std::string name, Device* field, std::string help);
  // A list of named paths; its check (names unique, weights positive and finite) is built in.
  ConfigKey(std::string section, std::string name, SourceListRef field, std::string help);

  std::string section;  // "training"
  std::string name;     // "steps"
  std::string help;
  ConfigValueRef value;
  std::function<void()> check;  // the single-key check of the bound field; empty: none

  std::string path() const { return section + "." + name; }  // "training.steps"
  // "int", "float", "bool", "string", …; an enum-like key's allowed values, "a, b or c".
  std::string type_name() const;
  std::string value_text() const;  // the current value, as YAML
  const ChoiceRef* choice() const { return std::get_if<ChoiceRef>(&value); }
};

// Every key of `config`, bound to its fields, sections in the order they are documented.
std::vector<ConfigKey> config_keys(JobConfig& config);

// The sections, in the table's order.
const std::vector<std::string>& config_sections();

// Sets `key` from text ("true", "8e-4", "a,b,c", "null", an enum-like key's name); InputError
// naming the key, the text, where it came from and the expected type (for an enum-like key: the
// allowed values).
void set_from_text(const ConfigKey& key, const std::string& text, const std::string& source);

// Sets a list of named paths from a YAML list of maps (null: the empty list); InputError naming
// the key, the entry and where it came from for anything else, an empty list included.
void set_source_list(const ConfigKey& key, const YAML::Node& node, const std::string& source);

// Sets optimizer.groups from a YAML list of {match, lr_scale, weight_decay} maps (null: none);
// InputError naming the key, the entry and where it came from for anything else.
void set_param_group_list(const ConfigKey& key, const YAML::Node& node,
                          const std::string& source);

}  // namespace titan::app
