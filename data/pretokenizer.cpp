#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace titan::data {

namespace {

// PCRE2 10.42 (Debian 12) has Unicode 14.0's tables; HF's Oniguruma has Unicode 16.0's. These
// are the code points Unicode 15.0, 15.1 and 16.0 made letters (L) and numbers (N, and decimal
// digits Nd, which \d is): new scripts (Kawi, Nag Mundari, Garay, Gurung Khema, Kirat Rai,
// Ol Onal, Sunuwar, Todhri, Tulu-Tigalari, ...), CJK extensions H and I, more Egyptian
// hieroglyphs. Added to \p{L}, \p{N} and \d, PCRE2 matches every code point as HF does
// (the reference test checks all 1,112,064). Other classes (\p{Lu}, \p{M}, ...) keep 14.0's.
constexpr std::string_view kLetterAdditions =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3})"
    R"(\x{10D4A}-\x{10D65}\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240})"
    R"(\x{11380}-\x{11389}\x{1138B}\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3})"
    R"(\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F})"
    R"(\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D}\x{16D40}-\x{16D6C})"
    R"(\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB})"
    R"(\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kDigitAdditions =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1E4F0}-\x{1E4F9})"
    R"(\x{1E5F1}-\x{1E5FA})";
constexpr std::string_view kOtherNumberAdditions = R"(\x{1D2C0}-\x{1D2D3})";  // Kaktovik, No

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Match data, a match context and a JIT stack per thread: pcre2_match writes into the match
// data, so one per thread makes splitting thread-safe with one compiled pattern. The JIT stack
// grows to 8 MB for long runs that backtrack (100 KB of spaces before a letter).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchState() {
    TT_CHECK(data && context && jit_stack, "PCRE2 could not allocate match data");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

struct Span {
  size_t start;
  size_t end;
  bool is_match;
};

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace

std::string onig_to_pcre2(std::string_view pattern, const std::string& where) {
  auto refuse = [&](std::string_view what, std::string_view why) {
    input_error(where, ": the pattern '", pattern, "' uses ", what, ", which ", why,
                "; titan_train runs the pattern in PCRE2 and cannot match it as Hugging Face does");
  };
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  bool class_start = false;  // just after '[' or '[^': a ']' here is a literal
  // A class, as a member of the class being written or as a class of its own.
  auto add_class = [&](std::string_view members, bool negated, std::string_view escape) {
    if (in_class && negated) refuse(escape, "cannot be negated inside a character class here");
    if (in_class) {
      out += members;
    } else {
      out += negated ? "[^" : "[";
      out += members;
      out += ']';
    }
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    bool at_class_start = class_start;
    class_start = false;
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      switch (e) {
        case 's': out += R"(\p{White_Space})"; break;
        case 'S': out += R"(\P{White_Space})"; break;
        case 'd':
        case 'D':
          add_class(std::string(R"(\p{Nd})") + std::string(kDigitAdditions), e == 'D', "\\D");
          break;
        case 'p':
        case 'P': {
          // \p{L} and \p{N} get the newer code points; other properties pass through.
          std::string_view name;
          size_t last = i + 1;  // the escape's last character
          if (last < pattern.size() && pattern[last] == '{') {
            last = pattern.find('}', last);
            if (last == std::string_view::npos) refuse("an unclosed \\p{", "is malformed");
            name = pattern.substr(i + 2, last - i - 2);
          } else {
            refuse("\\p or \\P without braces", "Oniguruma does not read as a property");
          }
          if (name == "L") {
            add_class(std::string(R"(\p{L})") + std::string(kLetterAdditions), e == 'P', "\\P{L}");
          } else if (name == "N") {
            add_class(std::string(R"(\p{N})") + std::string(kDigitAdditions) +
                          std::string(kOtherNumberAdditions),
                      e == 'P', "\\P{N}");
          } else {
            out += '\\';
            out += e;
            out.append(pattern.substr(i + 1, last - i));
          }
          i = last;
          break;
        }
        case 'w':
        case 'W':
          refuse("\\w or \\W",
                 "matches a different set in Oniguruma (letters, marks, all numbers, "
                 "some symbols) and PCRE2 (letters, numbers, '_')");
          break;
        case 'h':
        case 'H':
          refuse("\\h or \\H", "is a hex digit in Oniguruma and a horizontal space in PCRE2");
          break;
        case 'b':
        case 'B':
          if (!in_class) refuse("a word boundary (\\b, \\B)", "depends on Oniguruma's \\w");
          out += '\\';
          out += e;
          break;
        case 'Q': {
          size_t end = pattern.find("\\E", i + 1);
          size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
          out += '\\';
          out.append(pattern.substr(i, stop - i));
          i = stop - 1;
          break;
        }
        default: out += '\\'; out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && !at_class_start) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < pattern.size() && pattern[i + 1] == ':') {
          size_t end = pattern.find(":]", i + 2);
          if (end == std::string_view::npos) refuse("an unclosed POSIX class", "is malformed");
          out.append(pattern.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
        refuse("a nested character class", "PCRE2 does not have");
      } else if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') {
        refuse("a class intersection (&&)", "PCRE2 does not have");
      } else if (c == '^' && at_class_start && out.back() == '[') {
        class_start = true;
      }
    } else if (c == '[') {
      in_class = true;
      class_start = true;
    }
    out += c;
  }
  return out;
}

struct RegexSplit::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;

  ~Impl() { pcre2_code_free(code); }

  // Calls emit(start, end, is_match) for the matches of the pattern and the gaps between them,
  // in order, covering all of `text` (HF's Pattern::find_matches for a regex).
  template <class Emit>
  void find_matches(std::string_view text, Emit&& emit) const {
    MatchState& state = match_state();
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t previous = 0;
    size_t offset = 0;
    while (offset <= text.size()) {
      int rc =
          jit ? pcre2_jit_match(code, subject, text.size(), offset, 0, state.data, state.context)
              : pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, state.data,
                            state.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        throw Error(detail::concat("pre-tokenizer: PCRE2 failed on a text of ", text.size(),
                                   " bytes at byte ", offset, ": ", pcre2_message(rc)));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
      size_t start = ovector[0];
      size_t end = ovector[1];
      if (start > previous) emit(previous, start, false);
      emit(start, end, true);
      previous = end;
      if (end > start) {
        offset = end;
      } else {  // an empty match: search again one character on, as Oniguruma's find_iter does
        if (end >= text.size()) break;
        offset = end + utf8_length(static_cast<unsigned char>(text[end]));
      }
    }
    if (previous < text.size()) emit(previous, text.size(), false);
  }
};

RegexSplit::RegexSplit(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert,
                       const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  impl_->behavior = behavior;
  impl_->invert = invert;
  std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern, where);
  uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              options, &error, &error_offset, nullptr);
  if (impl_->code == nullptr) {
    input_error(where, ": PCRE2 cannot compile the pattern '", pattern, "' (as '", translated,
                "'): ", pcre2_message(error), " at offset ", error_offset,
                "; use a pattern Oniguruma and PCRE2 both read");
  }
  // Without JIT (a platform PCRE2 has no JIT for) the interpreter gives the same matches.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplit::~RegexSplit() = default;

// HF's NormalizedString::split: the matches and gaps, then the delimiter behaviour.
void RegexSplit::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  const Impl& m = *impl_;
  auto piece = [&](size_t start, size_t end) {
    if (end > start) pieces.push_back(text.substr(start, end - start));
  };
  if (m.behavior == SplitBehavior::kIsolated) {  // Llama 3's, and the hot path
    m.find_matches(text, [&](size_t start, size_t end, bool) { piece(start, end); });
    return;
  }
  thread_local std::vector<Span> spans;
  spans.clear();
  m.find_matches(text, [&](size_t start, size_t end, bool is_match) {
    spans.push_back(Span{start, end, is_match != m.invert});
  });
  thread_local std::vector<Span> merged;
  merged.clear();
  bool previous_match = false;
  switch (m.behavior) {
    case SplitBehavior::kIsolated: break;
    case SplitBehavior::kRemoved:
      for (const Span& span : spans) {
        if (!span.is_match) merged.push_back(span);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const Span& span : spans) {
        if (span.is_match == previous_match && !merged.empty()) {
          merged.back().end = span.end;
        } else {
          merged.push_back(span);
        }
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !merged.empty()) {
          merged.back().end = span.end;
        } else {
          merged.push_back(span);
        }
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& span = spans[i];
        if (span.is_match && !previous_match && !merged.empty()) {
          merged.back().start = span.start;
        } else {
          merged.push_back(span);
        }
        previous_match = span.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
  }
  for (const Span& span : merged) piece(span.start, span.end);
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::add_split(std::unique_ptr<RegexSplit> split) {
  splits_.push_back(std::move(split));
}

void PreTokenizer::set_byte_level(bool add_prefix_space, bool use_regex, const std::string& where) {
  add_prefix_space_ = add_prefix_space;
  if (use_regex) {
    gpt2_split_ = std::make_unique<RegexSplit>(kGpt2SplitPattern, false, SplitBehavior::kIsolated,
                                               false, where);
  }
}

void PreTokenizer::pre_tokenize(std::string_view text, std::vector<std::string_view>& words,
                                std::string& scratch) const {
  if (text.empty()) return;  // HF drops empty pieces before any step sees them
  if (splits_.size() == 1 && !add_prefix_space_ && !gpt2_split_) {  // Llama 3
    splits_[0]->split(text, words);
    return;
  }
  thread_local std::vector<std::string_view> pieces;
  thread_local std::vector<std::string_view> next;
  pieces.assign(1, text);
  for (const auto& split : splits_) {
    next.clear();
    for (std::string_view piece : pieces) split->split(piece, next);
    std::swap(pieces, next);
  }
  if (add_prefix_space_) {
    // HF's ByteLevel prepends a space to every piece that does not start with one.
    thread_local std::vector<std::pair<size_t, size_t>> spans;
    spans.clear();
    scratch.clear();
    for (std::string_view piece : pieces) {
      size_t start = scratch.size();
      if (piece.front() != ' ') scratch += ' ';
      scratch += piece;
      spans.emplace_back(start, scratch.size() - start);
    }
    pieces.clear();
    for (auto [start, size] : spans)
      pieces.push_back(std::string_view(scratch).substr(start, size));
  }
  for (std::string_view piece : pieces) {
    if (gpt2_split_) {
      gpt2_split_->split(piece, words);
    } else {
      words.push_back(piece);
    }
  }
}

}  // namespace titan::data
