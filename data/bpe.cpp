#include "data/bpe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>

#include "core/check.h"

namespace titan::data {

namespace {

// Ids at or above this are refused: the id tables are dense, and a typo such as 4e9 must not
// become a 100 GB allocation. The largest real vocabularies hold about a million tokens.
constexpr int64_t kMaxId = int64_t{1} << 24;
// Per-thread cache of merged words. HF's BPE caches up to 10,000 words shorter than 256 bytes;
// this one holds more (a corpus of many languages has many more distinct words) and starts
// over when full, which keeps its memory bounded (a few MB per thread) without bookkeeping.
constexpr size_t kCacheWords = size_t{1} << 16;
constexpr size_t kCacheMaxWordBytes = 256;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves; the other 68 bytes
// (controls, space, 0x7F-0xA0, 0xAD) are drawn as U+0100 upwards, in byte order.
struct ByteLevelTables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // by code point below U+0144; -1 where not in alphabet
  ByteLevelTables() {
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

std::optional<std::string> byte_level_bytes(std::string_view spelled) {
  std::string bytes;
  bytes.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size();) {
    auto lead = static_cast<unsigned char>(spelled[i]);
    char32_t c;
    size_t n;
    if (lead < 0x80) {
      c = lead;
      n = 1;
    } else if (lead < 0xE0) {
      c = lead & 0x1F;
      n = 2;
    } else if (lead < 0xF0) {
      c = lead & 0x0F;
      n = 3;
    } else {
      c = lead & 0x07;
      n = 4;
    }
    if (i + n > spelled.size()) return std::nullopt;
    for (size_t k = 1; k < n; ++k)
      c = (c << 6) | (static_cast<unsigned char>(spelled[i + k]) & 0x3F);
    i += n;
    std::optional<uint8_t> b = byte_level_byte(c);
    if (!b) return std::nullopt;
    bytes.push_back(static_cast<char>(*b));
  }
  return bytes;
}

std::string byte_level_decode(std::string_view spelled) {
  std::optional<std::string> bytes = byte_level_bytes(spelled);
  return bytes ? std::move(*bytes) : std::string(spelled);
}

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// (left id, right id) → (rank, merged id), open addressing with linear probing: the merge loop
// looks a pair up for every adjacent pair of every word it merges.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  explicit MergeTable(size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count + 16) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, {0, 0}});
    mask_ = capacity - 1;
  }

  // A pair given twice keeps its later rank, as HF's merge map (collected from the list in
  // order) does.
  void insert(int32_t left, int32_t right, Merge merge) {
    uint64_t key = pack(left, right);
    size_t i = slot_of(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{key, merge};
  }

  const Merge* find(int32_t left, int32_t right) const {
    uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// One symbol of a word being merged (HF's `Symbol`): a token id and its neighbours; `len` 0
// marks a symbol merged into the one on its left.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;
};

// A candidate merge at symbol `pos` (HF's `Merge`): lowest rank first, then leftmost.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

// What one thread keeps between words: the merge loop's buffers and the word cache. The cache
// belongs to one ByteLevelBpe at a time (its serial number): a thread that moves on to another
// tokenizer starts a fresh cache.
struct ThreadState {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  uint64_t cache_owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>
      cache;  // word → (offset, count) in cache_ids
  std::vector<int32_t> cache_ids;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

char32_t byte_level_char(uint8_t b) { return byte_level_tables().to_char[b]; }

std::optional<uint8_t> byte_level_byte(char32_t c) {
  const ByteLevelTables& tables = byte_level_tables();
  if (c >= tables.to_byte.size() || tables.to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables.to_byte[c]);
}

struct ByteLevelBpe::Impl {
  uint64_t serial = next_serial.fetch_add(1);
  BpeOptions options;
  std::optional<int32_t> unk_id;
  StringToId spelled_to_id;          // as in the file: merges, token_id()
  StringToId bytes_to_id;            // tokens of the byte-level alphabet, by their bytes
  std::array<int32_t, 256> byte_id;  // the one-byte tokens; -1 where the vocabulary has none
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_present;
  MergeTable merges{0};

  void merge(std::string_view word, std::vector<int32_t>& ids) const;
};

ByteLevelBpe::ByteLevelBpe(const std::vector<std::pair<std::string, int64_t>>& vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           const BpeOptions& options, const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  int64_t limit = 0;
  for (const auto& [spelled, id] : vocab) {
    if (id < 0 || id >= kMaxId) {
      input_error(where, ": model.vocab: token '", spelled, "' has id ", id, ", outside 0..",
                  kMaxId - 1, "; ids must be small non-negative integers");
    }
    limit = std::max(limit, id + 1);
  }
  // The tables below are indexed by id: a vocabulary numbered far past its size would make a
  // file of a few tokens allocate for millions. Tokenizers number their vocabularies densely
  // (Llama 3's model.vocab is exactly 0..127999), so allow twice the tokens' count and refuse
  // the rest before allocating.
  const auto dense_limit = static_cast<int64_t>(2 * vocab.size() + 256);
  if (limit > dense_limit) {
    input_error(where, ": model.vocab: ", vocab.size(), " tokens, but ids up to ", limit - 1,
                "; ids must number the tokens nearly densely (below ", dense_limit,
                " here); renumber the vocabulary from 0");
  }
  m.id_bytes.resize(static_cast<size_t>(limit));
  m.id_present.assign(static_cast<size_t>(limit), 0);
  std::vector<const std::string*> id_spelled(static_cast<size_t>(limit), nullptr);  // messages
  m.spelled_to_id.reserve(vocab.size());
  m.bytes_to_id.reserve(vocab.size());
  for (const auto& [spelled, id64] : vocab) {
    auto id = static_cast<int32_t>(id64);
    if (m.id_present[id]) {
      input_error(where, ": model.vocab: id ", id, " is given to both '", *id_spelled[id],
                  "' and '", spelled, "'; every token needs its own id");
    }
    id_spelled[id] = &spelled;
    if (!m.spelled_to_id.emplace(spelled, id).second) {
      input_error(where, ": model.vocab: token '", spelled, "' appears twice (ids ",
                  m.spelled_to_id.find(spelled)->second, " and ", id, ")");
    }
    m.id_present[id] = 1;
    if (std::optional<std::string> bytes = byte_level_bytes(spelled)) {
      m.bytes_to_id.emplace(*bytes, id);
      m.id_bytes[id] = std::move(*bytes);
    } else {
      m.id_bytes[id] = spelled;  // HF's decoder passes such a token through as its UTF-8
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    auto it = m.bytes_to_id.find(std::string_view(&byte, 1));
    m.byte_id[b] = it == m.bytes_to_id.end() ? -1 : it->second;
  }
  if (options.unk_token) {
    auto it = m.spelled_to_id.find(*options.unk_token);
    if (it == m.spelled_to_id.end()) {
      input_error(where, ": model.unk_token '", *options.unk_token,
                  "' is not in model.vocab; add it or set unk_token to null");
    }
    m.unk_id = it->second;
  }

  m.merges = MergeTable(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // Named references, not a structured binding: clang before 16 (the fuzz build's clang-14)
    // cannot capture a binding in the lambda below.
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    auto find = [&](const std::string& token, const char* role) {
      auto it = m.spelled_to_id.find(token);
      if (it == m.spelled_to_id.end()) {
        input_error(where, ": model.merges[", rank, "] ('", left, "', '", right, "'): its ", role,
                    " '", token,
                    "' is not in model.vocab; merges may only join tokens of the "
                    "vocabulary");
      }
      return it->second;
    };
    int32_t left_id = find(left, "left token");
    int32_t right_id = find(right, "right token");
    joined = left + right;
    int32_t new_id = find(joined, "result");
    m.merges.insert(left_id, right_id, {static_cast<int32_t>(rank), new_id});
  }
}

ByteLevelBpe::~ByteLevelBpe() = default;

int64_t ByteLevelBpe::id_limit() const { return static_cast<int64_t>(impl_->id_bytes.size()); }

size_t ByteLevelBpe::merge_count() const { return impl_->merges.size(); }

size_t ByteLevelBpe::token_count() const { return impl_->spelled_to_id.size(); }

std::optional<int32_t> ByteLevelBpe::token_id(std::string_view spelled) const {
  auto it = impl_->spelled_to_id.find(spelled);
  if (it == impl_->spelled_to_id.end()) return std::nullopt;
  return it->second;
}

const std::string* ByteLevelBpe::token_bytes(int32_t id) const {
  if (id < 0 || id >= id_limit() || !impl_->id_present[id]) return nullptr;
  return &impl_->id_bytes[id];
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  if (word.empty()) return;
  if (word.size() == 1 && m.byte_id[static_cast<uint8_t>(word[0])] >= 0) {
    ids.push_back(m.byte_id[static_cast<uint8_t>(word[0])]);
    return;
  }
  ThreadState& state = thread_state();
  if (state.cache_owner != m.serial) {
    state.cache.clear();
    state.cache_ids.clear();
    state.cache_owner = m.serial;
  }
  if (auto hit = state.cache.find(word); hit != state.cache.end()) {
    auto [offset, count] = hit->second;
    ids.insert(ids.end(), state.cache_ids.begin() + offset,
               state.cache_ids.begin() + offset + count);
    return;
  }
  size_t first = ids.size();
  if (m.options.ignore_merges) {
    if (auto it = m.bytes_to_id.find(word); it != m.bytes_to_id.end()) {
      ids.push_back(it->second);
    } else {
      m.merge(word, ids);
    }
  } else {
    m.merge(word, ids);
  }
  if (word.size() < kCacheMaxWordBytes) {
    if (state.cache.size() >= kCacheWords) {
      state.cache.clear();
      state.cache_ids.clear();
    }
    auto offset = static_cast<uint32_t>(state.cache_ids.size());
    state.cache_ids.insert(state.cache_ids.end(), ids.begin() + static_cast<ptrdiff_t>(first),
                           ids.end());
    state.cache.emplace(word, std::pair{offset, static_cast<uint32_t>(ids.size() - first)});
  }
}

// HF's merge_word + Word::merge_all: symbols from the bytes (unknown ones as unk or dropped),
// then a min-heap of candidate merges; an entry whose pair no longer stands at its position
// (a neighbour was merged away) is skipped when it comes up.
void ByteLevelBpe::Impl::merge(std::string_view word, std::vector<int32_t>& ids) const {
  ThreadState& state = thread_state();
  std::vector<Symbol>& symbols = state.symbols;
  symbols.clear();
  auto add = [&](int32_t id, int32_t len) {
    auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back(Symbol{id, index - 1, -1, len});
  };
  bool last_was_unk = false;
  for (char ch : word) {
    int32_t id = byte_id[static_cast<uint8_t>(ch)];
    if (id >= 0) {
      add(id, 1);
      last_was_unk = false;
    } else if (unk_id) {
      if (last_was_unk && options.fuse_unk) {
        ++symbols.back().len;
      } else {
        add(*unk_id, 1);
      }
      last_was_unk = true;
    }
  }

  std::vector<Candidate>& heap = state.heap;
  heap.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeTable::Merge* found = merges.find(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back(Candidate{found->rank, static_cast<int32_t>(i), found->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), CandidateAfter{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol right = symbols[left.next];
    const MergeTable::Merge* still = merges.find(left.id, right.id);
    if (still == nullptr || still->new_id != top.new_id) continue;

    symbols[left.next].len = 0;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeTable::Merge* found = merges.find(symbols[left.prev].id, left.id)) {
        heap.push_back(Candidate{found->rank, left.prev, found->new_id});
        std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
      }
    }
    if (left.next >= 0) {
      if (const MergeTable::Merge* found = merges.find(left.id, symbols[left.next].id)) {
        heap.push_back(Candidate{found->rank, top.pos, found->new_id});
        std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
      }
    }
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.len != 0) ids.push_back(symbol.id);
  }
}

}  // namespace titan::data
