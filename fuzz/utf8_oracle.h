// What a UTF-8 reader with replacement makes of bytes (the Unicode standard's "maximal subpart"
// practice, as WHATWG's TextDecoder and Python's errors="replace"): each maximal invalid
// subsequence becomes one U+FFFD. Written apart from data/, as the oracle the tokenizer target
// checks HfTokenizer against.
#pragma once

#include <string>
#include <string_view>

namespace titan::fuzz {

inline std::string utf8_replaced(std::string_view in) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  size_t i = 0;
  while (i < in.size()) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the valid range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      if (b == 0xE0) low = 0xA0;
      if (b == 0xED) high = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      if (b == 0xF0) low = 0x90;
      if (b == 0xF4) high = 0x8F;
    } else {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t valid = 1;
    while (valid < length && i + valid < in.size()) {
      const auto c = static_cast<unsigned char>(in[i + valid]);
      const unsigned char lo = valid == 1 ? low : 0x80, hi = valid == 1 ? high : 0xBF;
      if (c < lo || c > hi) break;
      ++valid;
    }
    if (valid == length) {
      out.append(in.substr(i, length));
    } else {
      out += kReplacement;
    }
    i += valid;
  }
  return out;
}

}  // namespace titan::fuzz
