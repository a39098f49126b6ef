// Opening training data in tests as titan_train opens data.path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_source.h"

namespace titan::testing {

// A token source of `path`, the format by its config name (auto, text, bin), the messages naming
// `key` as titan_train names data.path.
inline std::unique_ptr<data::TokenSource> open_source(const std::string& path,
                                                      std::string_view format,
                                                      const std::string& key = "data.path") {
  return data::open_token_source(
      {path, data::kTokenFormats.parse(format, "data.format"), key, "data.format"});
}

// Every token of `source`, in order.
inline std::vector<int32_t> read_all(const data::TokenSource& source) {
  std::vector<int32_t> tokens(static_cast<size_t>(source.size()));
  source.read(0, source.size(), tokens.data());
  return tokens;
}

}  // namespace titan::testing
