// Writing JSON by hand, safely: the one string escaper for the files titan_train writes
// (memory snapshots, Chrome traces, checkpoint metadata, Hugging Face exports), and the map
// layout of the files meant to be read by people.
#pragma once

#include <string>
#include <string_view>

namespace titan {

// Appends `text` as a JSON string literal, quotes included. Text may hold anything: quotes,
// backslashes and control characters are escaped, valid UTF-8 passes through, and a byte that
// is not part of valid UTF-8 becomes U+FFFD, so the file always parses.
void append_json_string(std::string& out, std::string_view text);
std::string json_string(std::string_view text);

// `value` (finite) as a JSON number with the shortest digits that read back to it, positional
// where that reads naturally and a float literal when integral: 500000.0, 1e-05, 8.0 (as
// Python's json writes floats, so a config.json we write reads as transformers' own).
std::string json_number(double value);

// Appends `map` (a map from string keys) as a JSON object with one member per line, `indent`
// spaces in, and its closing brace on a line of its own, two spaces less in:
//   {
//       "key": <value>,
//       "key": <value>
//     }
// append_value(out, value) writes each value.
template <class Map, class AppendValue>
void append_json_lines(std::string& out, const Map& map, int indent, AppendValue append_value) {
  const std::string member_indent(static_cast<size_t>(indent), ' ');
  out += '{';
  bool first = true;
  for (const auto& [key, value] : map) {
    out += first ? "\n" : ",\n";
    first = false;
    out += member_indent;
    append_json_string(out, key);
    out += ": ";
    append_value(out, value);
  }
  out += '\n';
  out.append(static_cast<size_t>(indent > 2 ? indent - 2 : 0), ' ');
  out += '}';
}

}  // namespace titan
