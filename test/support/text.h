// Looking for a phrase in a process's output or a printed table.
#pragma once

#include <string_view>

namespace titan::testing {

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace titan::testing
