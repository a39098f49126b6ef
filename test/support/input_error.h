// What a piece of code refuses as bad input: the message of the titan::InputError it throws.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <string>

#include "core/check.h"

namespace titan::testing {

// The message of the InputError `call()` throws; the test case fails (and "" is returned) when
// it throws nothing or another exception.
template <typename Call>
std::string input_error_message(Call&& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected titan::InputError, got another exception: " << e.what());
    return {};
  }
  FAIL_CHECK("expected titan::InputError, nothing was thrown");
  return {};
}

}  // namespace titan::testing
