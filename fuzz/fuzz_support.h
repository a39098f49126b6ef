// What every fuzz target shares: a scratch folder of this process's own for readers that take a
// path, and the readers' contract.
//
// The contract (docs/architecture.md#decision-12): a reader of outside input either returns
// a valid result or throws titan::InputError. Anything else is a finding, and each kind is made
// a crash that libFuzzer reports and saves:
//   another exception type          fuzz_reads() prints it and aborts
//   a result that breaks its own    FUZZ_REQUIRE (the targets check what they can: sizes
//   promises                        inside the file, a round trip that gives back its input)
//   a sanitizer report              ASan (out of bounds, use after free, leak), UBSan (overflow,
//                                   bad shift, misaligned load…): the build aborts on any
//   a hang, or memory sized by      scripts/fuzz.sh runs every target with -timeout,
//   unchecked input                 -rss_limit_mb and -malloc_limit_mb
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "core/check.h"

namespace titan::fuzz {

// A folder under $TMPDIR (or /tmp) made for this process on first use, removed at exit.
const std::string& scratch_folder();

// Writes `size` bytes to <scratch_folder>/<name> (replacing it) and returns the path.
std::string write_scratch_file(std::string_view name, const void* data, size_t size);

// Prints "fuzz contract: <reader>: <what>" and aborts, so libFuzzer records the input.
[[noreturn]] void contract_violation(std::string_view reader, std::string_view what);

// "first difference at line N: 'a' vs 'b'", for contract messages about two texts.
std::string first_difference(std::string_view a, std::string_view b);

// Runs `read`. True when it returned; false when it threw InputError (a clean refusal); any
// other exception is a contract violation naming its type and message.
template <class Read>
bool fuzz_reads(std::string_view reader, Read&& read) {
  try {
    read();
    return true;
  } catch (const InputError&) {
    return false;
  } catch (const std::exception& e) {
    contract_violation(reader, std::string("threw ") + typeid(e).name() + " (not InputError): " +
                                   e.what());
  } catch (...) {
    contract_violation(reader, "threw something that is not a std::exception");
  }
}

}  // namespace titan::fuzz

// FUZZ_REQUIRE(cond, what): a contract violation naming the condition when it is false.
#define FUZZ_REQUIRE(cond, reader, what)                                                   \
  do {                                                                                     \
    if (!(cond)) ::titan::fuzz::contract_violation(reader, std::string(what) + " [" #cond "]"); \
  } while (0)
