// The pre-tokenizer of a Hugging Face tokenizer.json: cuts text into the words BPE merges one
// at a time.
//
// HF runs its split patterns with Oniguruma; here they run in PCRE2 (compiled once with
// PCRE2_UTF | PCRE2_UCP and JIT-compiled; match data per thread, so splitting is thread-safe).
// The two engines agree on the patterns tokenizers use except for a few escapes, which are
// rewritten before compiling (onig_to_pcre2). Supported: `Split` (a regex or a literal, any of
// HF's five delimiter behaviours, `invert`), `ByteLevel` (GPT-2's pattern when `use_regex`,
// `add_prefix_space`) as the last step, and a `Sequence` of those.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

// GPT-2's split pattern, which HF's ByteLevel pre-tokenizer applies when `use_regex` is true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// An Oniguruma pattern (as HF's tokenizer.json holds them) rewritten for PCRE2 with UCP, so both
// match the same text:
//   \s \S        → \p{White_Space} \P{White_Space}: PCRE2's \s also takes U+180E (Mongolian
//                  vowel separator), which Unicode dropped from White_Space, as Oniguruma did;
//   \p{L} \p{N}  → the same plus the letters and numbers of Unicode 15.0–16.0 (PCRE2 10.42 has
//   \d (\P, \D)    Unicode 14.0's tables, HF's Oniguruma 16.0's), likewise \d (decimal digits)
//                  and the negations (outside a class);
// and refuses what has no faithful PCRE2 counterpart: \w \W (Oniguruma's word characters are
// another set), \b \B outside a class, \h \H (a hex digit in Oniguruma, a horizontal space in
// PCRE2), \pL without braces (not a property in Oniguruma), a negated class escape inside a
// class, nested classes and && intersections.
// InputError naming `where`.
std::string onig_to_pcre2(std::string_view pattern, const std::string& where);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// HF's `Split` pre-tokenizer with a compiled pattern.
class RegexSplit {
 public:
  // `pattern` is Oniguruma syntax, or a literal string when `literal`. InputError naming `where`
  // when PCRE2 refuses it.
  RegexSplit(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert,
             const std::string& where);
  ~RegexSplit();
  RegexSplit(const RegexSplit&) = delete;
  RegexSplit& operator=(const RegexSplit&) = delete;

  // Appends the non-empty pieces of `text` (valid UTF-8) to `pieces`, as views into `text`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Steps, in the file's order: any number of splits, then the byte-level step.
  void add_split(std::unique_ptr<RegexSplit> split);
  void set_byte_level(bool add_prefix_space, bool use_regex, const std::string& where);

  // Appends the words of `text` (valid UTF-8, one piece between added tokens) to `words`, as
  // views into `text` or, with add_prefix_space, into `scratch`, which must outlive them.
  void pre_tokenize(std::string_view text, std::vector<std::string_view>& words,
                    std::string& scratch) const;

 private:
  std::vector<std::unique_ptr<RegexSplit>> splits_;
  std::unique_ptr<RegexSplit> gpt2_split_;  // ByteLevel with use_regex
  bool add_prefix_space_ = false;
};

}  // namespace titan::data
