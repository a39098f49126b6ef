// Writing JSON by hand, safely: the one string escaper for the files titan_train writes
// (memory snapshots, Chrome traces).
#pragma once

#include <string>
#include <string_view>

namespace titan {

// Appends `text` as a JSON string literal, quotes included. Text may hold anything: quotes,
// backslashes and control characters are escaped, valid UTF-8 passes through, and a byte that
// is not part of valid UTF-8 becomes U+FFFD, so the file always parses.
void append_json_string(std::string& out, std::string_view text);
std::string json_string(std::string_view text);

}  // namespace titan
