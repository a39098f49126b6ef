// A value or a one-line refusal. The pipeline's planning functions (stage split, schedule
// generation, simulation) return one instead of throwing, because their callers differ in what
// a refusal means: titan_train turns it into a config error naming its own keys, a test asserts
// on the text, and a future planner may try the next candidate instead.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/check.h"

namespace titan::parallel::pipeline {

template <typename T>
class ValueOrRefusal {
 public:
  ValueOrRefusal(T value) : value_(std::move(value)) {}  // NOLINT: a value converts implicitly

  // The one line: what was wrong, the value seen, what to do.
  static ValueOrRefusal refused(std::string message) {
    ValueOrRefusal outcome;
    outcome.error_ = std::move(message);
    return outcome;
  }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    TT_CHECK(ok(), "pipeline: the value of a refusal was read: ", error_);
    return *value_;
  }
  T&& value() && {
    TT_CHECK(ok(), "pipeline: the value of a refusal was read: ", error_);
    return std::move(*value_);
  }
  // Empty when ok().
  const std::string& error() const { return error_; }

  // For a caller whose refusal is bad input: the value, or InputError with the line.
  T value_or_throw() && {
    if (!ok()) throw InputError(error_);
    return std::move(*value_);
  }

 private:
  ValueOrRefusal() = default;
  std::optional<T> value_;
  std::string error_;
};

}  // namespace titan::parallel::pipeline
