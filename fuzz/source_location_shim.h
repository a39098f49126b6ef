// std::source_location for the fuzz build only (forced in with -include by the root
// CMakeLists.txt when TITAN_FUZZ is on).
//
// Why: the fuzz build uses Debian 12's clang-14 (libFuzzer ships with it), whose libstdc++ is
// GCC 12's. That <source_location> defines the class only when the compiler has
// __builtin_source_location, which clang gained in version 15, so core/check.h would not
// compile. Clang 14 has the older builtins (__builtin_FILE, __builtin_LINE, …), evaluated at the
// call site when used as default arguments, which is all std::source_location::current() needs.
// The g++ build never sees this file.
#pragma once

#include <cstdint>
#include <source_location>

#if !defined(__cpp_lib_source_location)
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           uint_least32_t line = __builtin_LINE(),
                                           uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location where;
    where.file_ = file;
    where.function_ = function;
    where.line_ = line;
    where.column_ = column;
    return where;
  }
  constexpr source_location() noexcept = default;
  constexpr uint_least32_t line() const noexcept { return line_; }
  constexpr uint_least32_t column() const noexcept { return column_; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
  uint_least32_t column_ = 0;
};
}  // namespace std
#endif
