#include "app/config_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "app/closest_key.h"
#include "app/config_keys.h"
#include "app/yaml_document.h"
#include "core/check.h"

namespace titan::app {

std::string yaml_number(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

std::string yaml_scalar(const std::string& s) {
  auto safe = [](char c) {
    // (strchr finds a NUL too: it is the terminator of the set.)
    return std::isalnum(static_cast<unsigned char>(c)) ||
           (c != '\0' && std::strchr("._/+=-", c) != nullptr);
  };
  std::string lower;
  for (const char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* const words[] = {"null", "true", "false", "yes", "no", "on", "off", "y", "n"};
  const bool plain =
      !s.empty() && s.front() != '-' && std::all_of(s.begin(), s.end(), safe) &&
      std::none_of(std::begin(words), std::end(words), [&](const char* w) { return lower == w; });
  if (plain) return s;
  std::string quoted = "\"";
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      char escape[5];
      std::snprintf(escape, sizeof escape, "\\x%02x", byte);
      quoted += escape;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

void load_yaml(JobConfig& config, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    input_error("--config: '", path, "' ",
                std::filesystem::is_directory(path, ec) ? "is a folder, not a file"
                : std::filesystem::exists(path, ec)     ? "is not a regular file"
                                                        : "does not exist",
                "; pass a YAML config such as configs/debug_model.yaml");
  }
  // A config is a few kilobytes; a bigger file is the wrong file (a checkpoint, a corpus).
  constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec || bytes > kMaxConfigBytes) {
    input_error("--config: '", path, "' ",
                ec ? "cannot be sized (" + ec.message() + ")"
                   : "is " + std::to_string(bytes) + " bytes",
                "; a config is a small YAML file (at most ", kMaxConfigBytes,
                " bytes), such as configs/debug_model.yaml");
  }
  std::ifstream file(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.good() && !file.eof()) {
    input_error("--config: cannot read '", path, "'; check its permissions");
  }
  YamlDocument document;
  try {
    document = read_yaml_document(text);
  } catch (const YAML::Exception& e) {
    input_error("--config: cannot parse '", path, "' at line ", e.mark.line + 1, ": ", e.msg,
                "; fix the YAML syntax there");
  }
  // yaml-cpp's LoadFile reads the first document only: the keys after a "---" would be
  // dropped without a word.
  if (document.second_document_line != 0) {
    input_error("--config: '", path, "' holds a second YAML document (line ",
                document.second_document_line,
                "), which titan_train would ignore; one config is one document: remove the "
                "'---' and merge its sections into the first");
  }
  if (document.root.IsNull()) return;  // an empty file keeps every default
  const YAML::Node& root = document.root;
  if (!root.IsMap()) {
    input_error("--config: '", path, "' must be a map of sections (job:, model:, training:, …)");
  }
  std::vector<ConfigKey> keys = config_keys(config);
  std::vector<std::string> key_paths;
  for (const ConfigKey& key : keys) key_paths.push_back(key.path());

  // YAML forbids a key twice in one map; yaml-cpp keeps both, and one would silently win.
  std::map<std::string, int> seen;  // section or section.key → its line
  auto once = [&](const std::string& name, const YAML::Node& node) {
    const int line = node.Mark().line + 1;
    const auto [it, fresh] = seen.emplace(name, line);
    if (!fresh) {
      input_error(path, ": '", name, "' is given twice (lines ", it->second, " and ", line,
                  "); keep one");
    }
  };
  for (const auto& section : root) {
    if (!section.first.IsScalar()) {
      input_error(path, ": line ", section.first.Mark().line + 1,
                  ": a section name must be a word (job:, model:, …), not a list or a map");
    }
    const std::string section_name = section.first.Scalar();
    once(section_name, section.first);
    const auto& known = config_sections();
    if (std::find(known.begin(), known.end(), section_name) == known.end()) {
      std::string hint = closest_key(section_name, known);
      input_error(path, ": unknown section '", section_name, "'",
                  hint.empty() ? "" : "; did you mean '" + hint + "'?",
                  " (titan_train --help lists every section and key)");
    }
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) {
      input_error(path, ": section '", section_name, "' must be a map of keys, line ",
                  section.second.Mark().line + 1);
    }
    for (const auto& entry : section.second) {
      if (!entry.first.IsScalar()) {
        input_error(path, ": line ", entry.first.Mark().line + 1, ": a key of section '",
                    section_name, "' must be a word, not a list or a map");
      }
      const std::string name = section_name + "." + entry.first.Scalar();
      once(name, entry.first);
      auto key = std::find_if(keys.begin(), keys.end(),
                              [&](const ConfigKey& k) { return k.path() == name; });
      if (key == keys.end()) {
        std::string hint = closest_key(name, key_paths);
        input_error(path, ": unknown key '", name, "'",
                    hint.empty() ? "" : "; did you mean '" + hint + "'?",
                    " (titan_train --help lists every key)");
      }
      const std::string source = path + " line " + std::to_string(entry.second.Mark().line + 1);
      const YAML::Node& value = entry.second;
      if (std::holds_alternative<SourceListRef>(key->value)) {
        set_source_list(*key, value, source);
      } else if (std::holds_alternative<std::vector<model::ParamGroupRule>*>(key->value)) {
        set_param_group_list(*key, value, source);
      } else if (value.IsSequence()) {
        if (!std::holds_alternative<std::vector<std::string>*>(key->value)) {
          input_error(name, ": expected ", key->type_name(), ", got a list (", source, ")");
        }
        auto* list = std::get<std::vector<std::string>*>(key->value);
        list->clear();
        for (const auto& item : value) {
          if (!item.IsScalar()) input_error(name, ": list items must be strings (", source, ")");
          list->push_back(item.Scalar());
        }
      } else if (value.IsMap()) {
        input_error(name, ": expected ", key->type_name(), ", got a map (", source, ")");
      } else if (value.IsNull()) {
        if (auto* optional = std::get_if<std::optional<double>*>(&key->value)) {
          (*optional)->reset();
        } else if (auto* text = std::get_if<std::string*>(&key->value)) {
          (*text)->clear();
        } else {
          input_error(name, ": expected ", key->type_name(), ", got null (", source, ")");
        }
      } else {
        set_from_text(*key, value.Scalar(), source);
      }
    }
  }
}

std::string to_yaml(JobConfig& config) {
  std::string text;
  std::string section;
  for (const ConfigKey& key : config_keys(config)) {
    if (key.section != section) {
      section = key.section;
      text += section + ":\n";
    }
    text += "  " + key.name + ": " + key.value_text() + "\n";
  }
  return text;
}

}  // namespace titan::app
