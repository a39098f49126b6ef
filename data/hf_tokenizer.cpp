#include "data/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "core/json_reader.h"
#include "data/bpe.h"
#include "data/pretokenizer.h"

namespace titan::data {

namespace {

// ---- Reading the JSON: every failure names the config key, the file and the JSON path ----

JsonReader tokenizer_reader(const std::string& key, const std::string& file) {
  JsonReader::Style style;
  style.missing = "missing; a Hugging Face tokenizer.json has it";
  style.say_found = true;
  style.null_is_absent = true;  // as HF's optional fields
  return JsonReader(key + ": '" + file + "'", style);
}

// A token id: any int64 here (each section checks its own range); a wider number is no id.
int64_t id_value(const JsonReader& json, JsonValue value, std::string_view path) {
  const std::optional<uint64_t> big = value.get_uint64();
  if (big && *big > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    json.fail(path, "the number ", *big, " is far too large for an id");
  }
  return json.integer(value, path);
}

// The "type" of a section's object.
std::string_view type_of(const JsonReader& json, JsonObject object, const std::string& path) {
  return json.string(json.required(object, "type", path + ".type"), path + ".type");
}

// ---- Invalid UTF-8 → U+FFFD ----

// False when `text` is valid UTF-8. Otherwise `out` is `text` with each maximal subpart of an
// ill-formed sequence replaced by U+FFFD (Unicode's "best practice", which the WHATWG decoder
// that Node and browsers use follows): "\xE2\x82A" becomes "\uFFFDA", "\xC0\xAF" two U+FFFD.
bool replace_invalid_utf8(std::string_view text, std::string& out) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  size_t i = 0;
  bool replaced = false;
  size_t copied = 0;  // text[copied, i) is valid and not yet in `out`
  while (i < text.size()) {
    if (byte(i) < 0x80) {
      ++i;
      continue;
    }
    unsigned char lead = byte(i);
    size_t need = 0;
    unsigned char lower = 0x80;
    unsigned char upper = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 2;
      if (lead == 0xE0) lower = 0xA0;
      if (lead == 0xED) upper = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 3;
      if (lead == 0xF0) lower = 0x90;
      if (lead == 0xF4) upper = 0x8F;  // nothing above U+10FFFF
    }
    size_t seen = 0;  // continuation bytes that fit
    while (seen < need && i + 1 + seen < text.size()) {
      unsigned char next = byte(i + 1 + seen);
      if (next < lower || next > upper) break;
      lower = 0x80;
      upper = 0xBF;
      ++seen;
    }
    if (need > 0 && seen == need) {
      i += 1 + need;
      continue;
    }
    if (!replaced) {
      out.clear();
      out.reserve(text.size() + 16);
      replaced = true;
    }
    out.append(text.substr(copied, i - copied));
    out.append(kReplacement);
    i += 1 + seen;  // the lead and the continuations that fitted; the offending byte starts over
    copied = i;
  }
  if (replaced) out.append(text.substr(copied));
  return replaced;
}

// ---- Added tokens ----

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
};

// Unicode White_Space, which Rust's regex \s (HF's lstrip/rstrip) matches.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

char32_t decode_at(std::string_view text, size_t i, size_t* length) {
  auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(text[i + k])); };
  char32_t lead = b(0);
  if (lead < 0x80) {
    *length = 1;
    return lead;
  }
  if (lead < 0xE0) {
    *length = 2;
    return ((lead & 0x1F) << 6) | (b(1) & 0x3F);
  }
  if (lead < 0xF0) {
    *length = 3;
    return ((lead & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  }
  *length = 4;
  return ((lead & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// Where the run of white space that ends at `end` starts.
size_t white_space_before(std::string_view text, size_t end) {
  size_t start = end;
  while (start > 0) {
    size_t lead = start - 1;
    while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
    size_t length = 0;
    if (!is_white_space(decode_at(text, lead, &length))) break;
    start = lead;
  }
  return start;
}

size_t white_space_after(std::string_view text, size_t start) {
  size_t end = start;
  while (end < text.size()) {
    size_t length = 0;
    if (!is_white_space(decode_at(text, end, &length))) break;
    end += length;
  }
  return end;
}

struct Segment {
  size_t start;
  size_t end;
  int32_t id;  // the added token, or -1 for text to pre-tokenize
};

// One of HF's two added-token tries: the leftmost match, and the longest at that position (an
// Aho-Corasick automaton with MatchKind::LeftmostLongest). A few hundred short tokens, almost
// all starting with '<': candidates bucketed by first byte, longest first, are as quick.
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token) {
    auto first = static_cast<unsigned char>(token.content[0]);
    buckets_[first].push_back(&token);
    std::stable_sort(buckets_[first].begin(), buckets_[first].end(),
                     [](const AddedToken* a, const AddedToken* b) {
                       return a->content.size() > b->content.size();
                     });
    empty_ = false;
  }
  bool empty() const { return empty_; }

  // HF's AddedVocabulary::find_matches on `text` (the part of the input this pass sees), with
  // offsets shifted by `base`. Appends text and token segments covering all of `text`.
  void split(std::string_view text, size_t base, std::vector<Segment>& out) const {
    size_t start_offset = 0;
    for (size_t i = 0; i < text.size();) {
      const AddedToken* found = nullptr;
      for (const AddedToken* token : buckets_[static_cast<unsigned char>(text[i])]) {
        if (text.compare(i, token->content.size(), token->content) == 0) {
          found = token;
          break;
        }
      }
      if (found == nullptr) {
        ++i;
        continue;
      }
      size_t start = i;
      size_t stop = i + found->content.size();
      if (found->lstrip) start = std::max(white_space_before(text, start), start_offset);
      if (found->rstrip) stop = white_space_after(text, stop);
      start = std::max(start, start_offset);
      if (start_offset < start) out.push_back(Segment{base + start_offset, base + start, -1});
      out.push_back(Segment{base + start, base + stop, found->id});
      start_offset = stop;
      i += found->content.size();
    }
    if (start_offset < text.size())
      out.push_back(Segment{base + start_offset, base + text.size(), -1});
  }

 private:
  std::array<std::vector<const AddedToken*>, 256> buckets_;
  bool empty_ = true;
};

// ---- The file's sections ----

std::string resolve_file(const std::string& path, const std::string& key) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    std::string file = (std::filesystem::path(path) / "tokenizer.json").string();
    if (!std::filesystem::exists(file, error)) {
      input_error(key, ": '", path,
                  "' is a folder without a tokenizer.json; give the file or the "
                  "folder of a Hugging Face model that has one");
    }
    return file;
  }
  return path;
}

std::string read_text_file(const std::string& file, const std::string& key) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    input_error(key, ": '", file, "': cannot open: ", std::strerror(errno),
                "; give a Hugging Face tokenizer.json or the folder holding one (or 'byte')");
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) input_error(key, ": '", file, "': cannot read: ", std::strerror(errno));
  return std::move(content).str();
}

// A "Sequence" section (of pre-tokenizers, of post-processors): `visit(object, path)` for each
// object of its array `key`, in order.
template <class Visit>
void for_each_in_sequence(const JsonReader& json, JsonObject sequence, std::string_view key,
                          const std::string& path, Visit visit) {
  const std::string list_path = path + "." + std::string(key);
  size_t i = 0;
  for (const JsonValue inner : json.array(json.required(sequence, key, list_path), list_path)) {
    const std::string inner_path = json_index_path(list_path, i++);
    visit(json.object(inner, inner_path), inner_path);
  }
}

SplitBehavior split_behavior(const JsonReader& json, std::string_view name, std::string_view path) {
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  json.fail(path, "unknown behavior '", name,
            "'; Hugging Face's are Removed, Isolated, MergedWithPrevious, MergedWithNext, "
            "Contiguous");
}

// One step of the pre-tokenizer; `byte_level_seen` says a ByteLevel step came already (it must
// be the last: after it the text is in the byte-level alphabet).
void add_pre_tokenizer_step(const JsonReader& json, JsonObject step, const std::string& path,
                            PreTokenizer& pre, bool& byte_level_seen) {
  std::string_view type = type_of(json, step, path);
  if (byte_level_seen) {
    json.fail(path, "a '", type,
              "' step after ByteLevel; titan_train supports Split steps "
              "followed by one ByteLevel step");
  }
  if (type == "Sequence") {
    for_each_in_sequence(json, step, "pretokenizers", path,
                         [&](JsonObject inner, const std::string& inner_path) {
                           add_pre_tokenizer_step(json, inner, inner_path, pre, byte_level_seen);
                         });
  } else if (type == "Split") {
    JsonObject pattern =
        json.object(json.required(step, "pattern", path + ".pattern"), path + ".pattern");
    std::optional<JsonValue> regex = json.member(pattern, "Regex");
    std::optional<JsonValue> literal = json.member(pattern, "String");
    if (!regex && !literal)
      json.fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    std::string pattern_path = path + ".pattern." + (regex ? "Regex" : "String");
    std::string_view text = json.string(regex ? *regex : *literal, pattern_path);
    SplitBehavior behavior = split_behavior(
        json, json.string(json.required(step, "behavior", path + ".behavior"), path + ".behavior"),
        path + ".behavior");
    bool invert = json.boolean(step, "invert", path + ".invert", false);
    pre.add_split(std::make_unique<RegexSplit>(text, !regex, behavior, invert,
                                               json.file() + ": " + pattern_path));
  } else if (type == "ByteLevel") {
    pre.set_byte_level(json.boolean(step, "add_prefix_space", path + ".add_prefix_space", true),
                       json.boolean(step, "use_regex", path + ".use_regex", true),
                       json.file() + ": " + path);
    byte_level_seen = true;
  } else {
    json.fail(path + ".type", "the pre-tokenizer '", type,
              "' is not supported; titan_train reads byte-level BPE tokenizers (Split and "
              "ByteLevel pre-tokenizers, as Llama 3's and GPT-2's)");
  }
}

// The special tokens a TemplateProcessing puts before and after a single sequence.
struct Template {
  std::optional<int32_t> before;
  std::optional<int32_t> after;
};

std::optional<int32_t> template_token_id(const JsonReader& json, JsonObject processor,
                                         std::string_view name, const std::string& path) {
  JsonObject specials =
      json.object(json.required(processor, "special_tokens", path + ".special_tokens"),
                  path + ".special_tokens");
  std::string entry_path = path + ".special_tokens." + std::string(name);
  std::optional<JsonValue> entry = json.member(specials, name);
  if (!entry) json.fail(entry_path, "missing: the template uses '", name, "'");
  JsonArray ids =
      json.array(json.required(json.object(*entry, entry_path), "ids", entry_path + ".ids"),
                 entry_path + ".ids");
  if (ids.size() != 1) return std::nullopt;  // not one token: no single BOS/EOS to report
  int64_t id = id_value(json, ids.at(0), entry_path + ".ids[0]");
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    json.fail(entry_path + ".ids[0]", "id ", id, " out of range");
  return static_cast<int32_t>(id);
}

void read_post_processor(const JsonReader& json, JsonObject processor, const std::string& path,
                         Template& found) {
  std::string_view type = type_of(json, processor, path);
  if (type == "Sequence") {
    for_each_in_sequence(json, processor, "processors", path,
                         [&](JsonObject inner, const std::string& inner_path) {
                           read_post_processor(json, inner, inner_path, found);
                         });
  } else if (type == "TemplateProcessing") {
    JsonArray single =
        json.array(json.required(processor, "single", path + ".single"), path + ".single");
    bool sequence_seen = false;
    size_t i = 0;
    for (JsonValue item_element : single) {
      std::string item_path = json_index_path(path + ".single", i++);
      JsonObject item = json.object(item_element, item_path);
      if (json.member(item, "Sequence")) {
        sequence_seen = true;
      } else if (std::optional<JsonValue> special = json.member(item, "SpecialToken")) {
        std::string special_path = item_path + ".SpecialToken";
        std::string_view name = json.string(
            json.required(json.object(*special, special_path), "id", special_path + ".id"),
            special_path + ".id");
        std::optional<int32_t>& slot = sequence_seen ? found.after : found.before;
        if (!slot) slot = template_token_id(json, processor, name, path);
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto token = [&](std::string_view key) -> std::optional<int32_t> {
      std::optional<JsonValue> pair = json.member(processor, key);
      if (!pair) return std::nullopt;
      JsonArray items = json.array(*pair, path + "." + std::string(key));
      if (items.size() != 2) return std::nullopt;
      return static_cast<int32_t>(id_value(json, items.at(1), path + "." + std::string(key) + "[1]"));
    };
    if (!found.before) found.before = token("cls");
    if (!found.after) found.after = token("sep");
  }
  // ByteLevel and others add no tokens to a single sequence.
}

// ---- The file, section by section (in the order HfTokenizer::load reads them) ----

// The file's root object, pointing into `document`.
JsonObject parse_file(const JsonReader& json, JsonDocument& document, const std::string& file,
                      const std::string& key) {
  document.set_text(read_text_file(file, key));
  if (!document.parse()) {
    json.fail_file("not JSON (", document.error(), "); give a Hugging Face tokenizer.json");
  }
  return json.object(document.root(), "the file");
}

// model's options, refusing what byte-level BPE does not have.
BpeOptions read_bpe_options(const JsonReader& json, JsonObject model) {
  if (std::optional<JsonValue> type = json.member(model, "type")) {
    std::string_view name = json.string(*type, "model.type");
    if (name != "BPE") {
      json.fail("model.type", "'", name,
                "' is not supported; titan_train reads byte-level BPE "
                "tokenizers (model.type 'BPE', as Llama 3's and GPT-2's)");
    }
  }
  if (json.boolean(model, "byte_fallback", "model.byte_fallback", false)) {
    json.fail("model.byte_fallback",
              "true (SentencePiece-style BPE, as Llama 2's) is not "
              "supported; titan_train reads byte-level BPE (byte_fallback false)");
  }
  if (std::optional<JsonValue> dropout = json.member(model, "dropout")) {
    if (dropout->get_double() != std::optional<double>(0)) {
      json.fail("model.dropout", "BPE dropout makes encoding random; set it to null");
    }
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (std::optional<JsonValue> value = json.member(model, affix)) {
      if (!json.string(*value, std::string("model.") + affix).empty()) {
        json.fail(std::string("model.") + affix,
                  "not supported (byte-level BPE has none); set it to null");
      }
    }
  }
  BpeOptions options;
  options.ignore_merges = json.boolean(model, "ignore_merges", "model.ignore_merges", false);
  options.fuse_unk = json.boolean(model, "fuse_unk", "model.fuse_unk", false);
  if (std::optional<JsonValue> unk = json.member(model, "unk_token")) {
    options.unk_token = std::string(json.string(*unk, "model.unk_token"));
  }
  return options;
}

// model.vocab: token → id, in file order.
std::vector<std::pair<std::string, int64_t>> read_vocab(const JsonReader& json, JsonObject model) {
  const JsonObject vocab_object =
      json.object(json.required(model, "vocab", "model.vocab"), "model.vocab");
  std::vector<std::pair<std::string, int64_t>> vocab;
  vocab.reserve(vocab_object.size());
  for (const JsonMember entry : vocab_object) {
    const int64_t id = id_value(json, entry.value, "model.vocab['" + std::string(entry.key) + "']");
    vocab.emplace_back(std::string(entry.key), id);
  }
  return vocab;
}

// model.merges, in either spelling: "a b" (the older) or ["a", "b"].
std::vector<std::pair<std::string, std::string>> read_merges(const JsonReader& json,
                                                             JsonObject model) {
  const JsonArray merges_array =
      json.array(json.required(model, "merges", "model.merges"), "model.merges");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_array.size());
  size_t i = 0;
  for (const JsonValue merge : merges_array) {
    const std::string path = json_index_path("model.merges", i++);
    if (const std::optional<std::string_view> text = merge.get_string()) {
      const size_t space = text->find(' ');
      if (space == std::string_view::npos || text->find(' ', space + 1) != std::string_view::npos) {
        json.fail(path, "'", *text, "' is not two tokens separated by one space");
      }
      merges.emplace_back(std::string(text->substr(0, space)), std::string(text->substr(space + 1)));
    } else if (const std::optional<JsonArray> pair = merge.get_array(); pair && pair->size() == 2) {
      merges.emplace_back(std::string(json.string(pair->at(0), path + "[0]")),
                          std::string(json.string(pair->at(1), path + "[1]")));
    } else {
      json.fail(path, "expected \"a b\" or [\"a\", \"b\"], found ", merge.type_name());
    }
  }
  return merges;
}

// model: byte-level BPE only.
std::unique_ptr<ByteLevelBpe> read_model(const JsonReader& json, JsonObject root) {
  const JsonObject model = json.object(json.required(root, "model", "model"), "model");
  const BpeOptions options = read_bpe_options(json, model);
  const std::vector<std::pair<std::string, int64_t>> vocab = read_vocab(json, model);
  const std::vector<std::pair<std::string, std::string>> merges = read_merges(json, model);
  return std::make_unique<ByteLevelBpe>(vocab, merges, options, json.file());
}

// normalizer: none (Llama 3 and GPT-2 have none).
void check_normalizer(const JsonReader& json, JsonObject root) {
  if (std::optional<JsonValue> normalizer = json.member(root, "normalizer")) {
    json.fail("normalizer", "the normalizer '",
              type_of(json, json.object(*normalizer, "normalizer"), "normalizer"),
              "' is not supported; titan_train reads tokenizers without one (normalizer null)");
  }
}

// pre_tokenizer: Split steps, then ByteLevel.
void read_pre_tokenizer(const JsonReader& json, JsonObject root, PreTokenizer& pre) {
  std::optional<JsonValue> step = json.member(root, "pre_tokenizer");
  if (!step) {
    json.fail("pre_tokenizer", "null; a byte-level BPE tokenizer has a ByteLevel pre-tokenizer");
  }
  bool byte_level_seen = false;
  add_pre_tokenizer_step(json, json.object(*step, "pre_tokenizer"), "pre_tokenizer", pre,
                         byte_level_seen);
  if (!byte_level_seen) {
    json.fail("pre_tokenizer", "no ByteLevel step; titan_train reads byte-level BPE tokenizers");
  }
}

// decoder: ByteLevel (what decode() does).
void check_decoder(const JsonReader& json, JsonObject root) {
  std::optional<JsonValue> decoder = json.member(root, "decoder");
  std::string_view type =
      decoder ? type_of(json, json.object(*decoder, "decoder"), "decoder") : "null";
  if (type != "ByteLevel") {
    json.fail("decoder", "'", type,
              "' is not supported; titan_train decodes byte-level BPE "
              "(decoder ByteLevel)");
  }
}

struct ThreadScratch {
  std::string sanitized;
  std::string prefixed;
  std::vector<Segment> segments;
  std::vector<Segment> inner;
  std::vector<std::string_view> words;
};

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

}  // namespace

struct HfTokenizer::Impl {
  std::string file;
  std::unique_ptr<ByteLevelBpe> bpe;
  PreTokenizer pre_tokenizer;
  std::vector<AddedToken> added;  // never resized after the matchers point into it
  std::unordered_map<std::string, int32_t> added_ids;
  AddedTokenMatcher plain_matcher;       // normalized: false (HF's split_trie)
  AddedTokenMatcher normalized_matcher;  // normalized: true (HF's split_normalized_trie)
  std::vector<std::string> id_bytes;     // what decode gives for each id
  std::vector<uint8_t> id_present;
  int64_t vocab_size = 0;
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;

  std::optional<int32_t> id_of(std::string_view token) const {
    if (auto it = added_ids.find(std::string(token)); it != added_ids.end()) return it->second;
    return bpe->token_id(token);
  }

  void read_added_tokens(const JsonReader& json, JsonObject root);
  void build_decode_table();
  void read_special_tokens(const JsonReader& json, JsonObject root);

  // Steps 1 and 2 of encode: the text made valid, then cut at added tokens. Returns the text
  // the segments point into.
  std::string_view segment(std::string_view text, ThreadScratch& scratch) const {
    std::string_view valid =
        replace_invalid_utf8(text, scratch.sanitized) ? scratch.sanitized : text;
    std::vector<Segment>& segments = scratch.segments;
    segments.clear();
    if (plain_matcher.empty()) {
      if (!valid.empty()) segments.push_back(Segment{0, valid.size(), -1});
    } else {
      plain_matcher.split(valid, 0, segments);
    }
    if (!normalized_matcher.empty()) {
      std::vector<Segment>& inner = scratch.inner;
      inner.clear();
      for (const Segment& s : segments) {
        if (s.id >= 0) {
          inner.push_back(s);
        } else {
          normalized_matcher.split(valid.substr(s.start, s.end - s.start), s.start, inner);
        }
      }
      std::swap(segments, inner);
    }
    return valid;
  }
};

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

// added_tokens. HF does not take their ids from the file: it gives each, in file order, the id
// of the same text in the vocabulary, or else the next one after the vocabulary's token count
// and the added tokens so far (and only warns when that differs from the file). A file whose
// ids follow another rule would encode differently in HF than its ids say: refused. Sets
// vocab_size to one past the largest id.
void HfTokenizer::Impl::read_added_tokens(const JsonReader& json, JsonObject root) {
  int64_t id_limit = bpe->id_limit();
  const auto vocab_count = static_cast<int64_t>(bpe->token_count());
  std::optional<int64_t> max_added;
  if (std::optional<JsonValue> added_json = json.member(root, "added_tokens")) {
    size_t i = 0;
    for (const JsonValue element : json.array(*added_json, "added_tokens")) {
      std::string path = json_index_path("added_tokens", i++);
      JsonObject entry = json.object(element, path);
      AddedToken token;
      int64_t id = id_value(json, json.required(entry, "id", path + ".id"), path + ".id");
      if (id < 0 || id >= (int64_t{1} << 24)) {
        json.fail(path + ".id", "id ", id, " is outside 0..16777215");
      }
      token.id = static_cast<int32_t>(id);
      token.content = std::string(
          json.string(json.required(entry, "content", path + ".content"), path + ".content"));
      token.special = json.boolean(entry, "special", path + ".special", false);
      token.normalized = json.boolean(entry, "normalized", path + ".normalized", !token.special);
      token.lstrip = json.boolean(entry, "lstrip", path + ".lstrip", false);
      token.rstrip = json.boolean(entry, "rstrip", path + ".rstrip", false);
      if (json.boolean(entry, "single_word", path + ".single_word", false)) {
        json.fail(path + ".single_word",
                  "true is not supported (its word test is Rust's \\w); "
                  "set it to false");
      }
      if (token.content.empty()) continue;  // HF ignores an empty added token
      if (auto [it, inserted] = added_ids.emplace(token.content, token.id); !inserted) {
        json.fail(path + ".content", "'", token.content, "' is added twice (ids ", it->second,
                  " and ", token.id, ")");
      }
      int64_t hf_id = 0;
      if (std::optional<int32_t> in_vocab = bpe->token_id(token.content)) {
        hf_id = *in_vocab;
      } else if (!max_added) {
        hf_id = vocab_count;
      } else {
        hf_id = *max_added >= vocab_count || vocab_count == 0 ? *max_added + 1 : vocab_count;
      }
      if (hf_id != id) {
        json.fail(path + ".id", "'", token.content, "' has id ", id,
                  ", but Hugging Face's tokenizers gives it ", hf_id,
                  " (the id of the same token in model.vocab, else the next after the "
                  "vocabulary's ",
                  vocab_count,
                  " tokens and the added tokens before it); fix "
                  "the file's ids");
      }
      max_added = std::max(max_added.value_or(hf_id), hf_id);
      id_limit = std::max(id_limit, id + 1);
      added.push_back(std::move(token));
    }
  }
  for (const AddedToken& token : added) {
    (token.normalized ? normalized_matcher : plain_matcher).add(token);
  }
  vocab_size = id_limit;
}

// What decode() gives for each id.
void HfTokenizer::Impl::build_decode_table() {
  id_bytes.resize(static_cast<size_t>(vocab_size));
  id_present.assign(static_cast<size_t>(vocab_size), 0);
  for (int32_t id = 0; id < bpe->id_limit(); ++id) {
    if (const std::string* bytes = bpe->token_bytes(id)) {
      id_bytes[id] = *bytes;
      id_present[id] = 1;
    }
  }
  for (const AddedToken& token : added) {
    id_bytes[token.id] = byte_level_decode(token.content);
    id_present[token.id] = 1;
  }
}

// BOS and EOS (docs/tokenizer.md): the post-processor's template first for BOS; EOS by name.
void HfTokenizer::Impl::read_special_tokens(const JsonReader& json, JsonObject root) {
  Template found;
  if (std::optional<JsonValue> post = json.member(root, "post_processor")) {
    read_post_processor(json, json.object(*post, "post_processor"), "post_processor", found);
  }
  auto named = [&](std::initializer_list<std::string_view> names) -> std::optional<int32_t> {
    for (std::string_view name : names) {
      if (std::optional<int32_t> id = id_of(name)) return id;
    }
    return std::nullopt;
  };
  bos = found.before ? found.before : named({"<|begin_of_text|>", "<s>", "<bos>"});
  eos = named({"<|end_of_text|>"});
  if (!eos) eos = found.after ? found.after : named({"</s>", "<|endoftext|>", "<eos>"});
  for (std::optional<int32_t> id : {bos, eos}) {
    if (id && (*id < 0 || *id >= vocab_size || !id_present[*id])) {
      json.fail("post_processor", "names the token id ", *id, ", which no token has");
    }
  }
}

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path, const std::string& key) {
  auto impl = std::make_unique<Impl>();
  impl->file = resolve_file(path, key);
  const JsonReader json = tokenizer_reader(key, impl->file);
  JsonDocument document;
  const JsonObject root = parse_file(json, document, impl->file, key);
  impl->bpe = read_model(json, root);
  impl->read_added_tokens(json, root);
  check_normalizer(json, root);
  read_pre_tokenizer(json, root, impl->pre_tokenizer);
  check_decoder(json, root);
  impl->build_decode_table();
  impl->read_special_tokens(json, root);
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  ThreadScratch& scratch = thread_scratch();
  std::string_view valid = m.segment(text, scratch);
  std::vector<int32_t> ids;
  ids.reserve(valid.size() / 3 + 8);
  for (const Segment& s : scratch.segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    scratch.words.clear();
    m.pre_tokenizer.pre_tokenize(valid.substr(s.start, s.end - s.start), scratch.words,
                                 scratch.prefixed);
    for (std::string_view word : scratch.words) m.bpe->encode_word(word, ids);
  }
  return ids;
}

std::vector<std::string> HfTokenizer::words(std::string_view text) const {
  const Impl& m = *impl_;
  ThreadScratch& scratch = thread_scratch();
  std::string_view valid = m.segment(text, scratch);
  std::vector<std::string> out;
  for (const Segment& s : scratch.segments) {
    if (s.id >= 0) {
      out.emplace_back(valid.substr(s.start, s.end - s.start));
      continue;
    }
    scratch.words.clear();
    m.pre_tokenizer.pre_tokenize(valid.substr(s.start, s.end - s.start), scratch.words,
                                 scratch.prefixed);
    for (std::string_view word : scratch.words) out.emplace_back(word);
  }
  return out;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= m.vocab_size || !m.id_present[id]) {
      input_error("decode: id ", id, " is not a token of '", m.file, "' (",
                  id < 0 || id >= m.vocab_size ? "ids run 0.." + std::to_string(m.vocab_size - 1)
                                               : std::string("no token has that id"),
                  "); decode ids this tokenizer made");
    }
    text += m.id_bytes[id];
  }
  return text;
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> HfTokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> HfTokenizer::eos_id() const { return impl_->eos; }
const std::string& HfTokenizer::file() const { return impl_->file; }

std::optional<int32_t> HfTokenizer::token_id(std::string_view token) const {
  return impl_->id_of(token);
}

std::string HfTokenizer::describe() const {
  const Impl& m = *impl_;
  auto token = [&](std::optional<int32_t> id) {
    return id ? "'" + m.id_bytes[*id] + "' (" + std::to_string(*id) + ")" : std::string("none");
  };
  return detail::concat("Hugging Face byte-level BPE from ", m.file, " (", m.vocab_size,
                        " tokens, ", m.bpe->merge_count(), " merges; BOS ", token(m.bos), ", EOS ",
                        token(m.eos), ")");
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const std::string& key) {
  return HfTokenizer::load(path, key);
}

}  // namespace titan::data
