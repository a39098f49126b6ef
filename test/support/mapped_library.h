// Whether this process has mapped a shared library (its /proc/self/maps names it): the check
// that a library the binaries load at its first use (cuBLASLt, cuDNN) is not loaded before.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace titan::testing {

inline bool library_mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

}  // namespace titan::testing
