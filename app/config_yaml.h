// The config as YAML: reading a file into a JobConfig through the key table, and printing the
// effective config (--print-config, TensorBoard's config text) so that it reads back the same.
#pragma once

#include <string>

#include "app/config.h"

namespace titan::app {

// Reads a YAML config file into `config`; InputError for a missing file, a parse error, an
// unknown section or key (with the closest known key), or a value of the wrong type or, for an
// enum-like key, not one of its names (listing them).
void load_yaml(JobConfig& config, const std::string& path);

// The effective config as YAML, every key, sections in order.
std::string to_yaml(JobConfig& config);

// A string as a YAML scalar that reads back as the same string: plain only when it is made of
// characters that mean nothing to YAML anywhere in a scalar, and is not a word YAML reads as
// another type; otherwise double-quoted with YAML's escapes (a quote, a backslash, a control
// character or a NUL inside, a leading "- " or "? ", would otherwise end or bend the scalar, and
// --print-config's output would no longer load back; fuzz_config_yaml checks it).
std::string yaml_scalar(const std::string& text);

// A float as YAML, to 10 significant digits: what it prints reads back as a value that prints
// the same.
std::string yaml_number(double value);

}  // namespace titan::app
