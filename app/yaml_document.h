#pragma once
// The one YAML document of a config file, read without yaml-cpp's LoadAll.
//
// yaml-cpp 0.7 (Debian 12's) never returns from LoadAll on a stray ',' after a document, as in
// "[a]," or "{a: 1},": its parser hands back an empty document without consuming the ',', and
// LoadAll asks for the next one forever, allocating a node each time until the machine runs out
// of memory (yaml-cpp issue #1040, fixed upstream in 2024 by PR #1319, after 0.8). Found by
// fuzz_config_yaml in CI (fuzz/corpus/fuzz_config_yaml/regression-stray_comma_*).
#include <yaml-cpp/yaml.h>

#include <string>

namespace titan::app {

struct YamlDocument {
  YAML::Node root;               // the first document; null when the text holds none
  int second_document_line = 0;  // 1-based line of a second, non-empty document; 0: none
};

// Throws YAML::ParserException, with the mark of the offending text, on a syntax error,
// including text the parser cannot step past.
YamlDocument read_yaml_document(const std::string& text);

}  // namespace titan::app
