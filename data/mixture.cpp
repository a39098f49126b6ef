#include "data/mixture.h"

#include <cmath>
#include <map>

#include "core/check.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace titan::data {

namespace {

// ⌊2^64 / φ⌋, odd: the Weyl step of the golden ratio, whose sequence has the lowest
// discrepancy of any single step.
constexpr uint64_t kGoldenStep = 0x9E3779B97F4A7C15ull;

}  // namespace

WindowSourceSequence::WindowSourceSequence(const std::vector<double>& weights, uint64_t seed)
    : offset_(CounterRng(seed, "data.mixture").bits64(0)) {
  TT_CHECK(!weights.empty(), "a mixture needs a source");
  long double total = 0;
  for (double w : weights) {
    TT_CHECK(std::isfinite(w) && w > 0, "mixture weight ", w);
    total += w;
  }
  long double cumulative = 0;
  for (double w : weights) {
    cumulative += w;
    const long double share = cumulative / total;
    // 2^64 · share, kept below 2^64; the last source takes whatever rounding leaves.
    const long double scaled = std::ldexp(share, 64);
    bounds_.push_back(scaled >= 18446744073709551615.0L ? UINT64_MAX
                                                        : static_cast<uint64_t>(scaled));
  }
  bounds_.back() = UINT64_MAX;
}

int64_t WindowSourceSequence::source_of(int64_t window) const {
  const uint64_t u = offset_ + static_cast<uint64_t>(window) * kGoldenStep;  // mod 2^64
  for (size_t k = 0; k + 1 < bounds_.size(); ++k) {
    if (u < bounds_[k]) return static_cast<int64_t>(k);
  }
  return static_cast<int64_t>(bounds_.size()) - 1;
}

namespace {

std::vector<double> weights_of(const std::vector<MixtureSource>& sources) {
  std::vector<double> weights;
  for (const MixtureSource& s : sources) weights.push_back(s.weight);
  return weights;
}

}  // namespace

MixtureLoader::MixtureLoader(std::vector<MixtureSource> sources, int64_t seq_len, uint64_t seed,
                             int64_t dp_rank, int64_t dp_size, const char* seq_len_key)
    : sources_(std::move(sources)),
      sequence_(weights_of(sources_), seed),
      seq_len_(seq_len),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      source_samples_(sources_.size(), 0) {
  TT_CHECK(dp_size_ >= 1 && dp_rank_ >= 0 && dp_rank_ < dp_size_, "MixtureLoader: dp rank ",
           dp_rank_, " of ", dp_size_);
  // sources_ is never resized after this: each loader keeps a pointer to its source's key.
  for (const MixtureSource& s : sources_) {
    loaders_.push_back(std::make_unique<DataLoader>(s.tokens, seq_len_, seed, 0, 1,
                                                    LoaderKeys{s.path_key.c_str(), seq_len_key}));
  }
}

Tensor MixtureLoader::next_batch(int64_t local_batch) {
  TT_CHECK(local_batch > 0, "next_batch: local batch ", local_batch);
  profiler::Span span("data.next_batch", "data");
  Tensor batch = Tensor::empty({local_batch, seq_len_ + 1}, DType::I32);
  int32_t* dst = batch.data<int32_t>();
  // Every rank walks the whole global batch, so that each source's count, and so the window
  // each sample reads, is the same on every mesh.
  const int64_t mine = dp_rank_ * local_batch;
  for (int64_t i = 0; i < local_batch * dp_size_; ++i) {
    const int64_t k = sequence_.source_of(samples_consumed_ + i);
    const int64_t sample = source_samples_[k]++;
    const int64_t windows = loaders_[k]->windows_per_epoch();
    if (sample > 0 && sample % windows == 0) {
      notes_.push_back(detail::concat(
          sources_[k].name.empty() ? "the data" : "source '" + sources_[k].name + "'",
          " ran out of its ", windows, " windows; starting its epoch ", sample / windows + 1));
    }
    if (i >= mine && i < mine + local_batch) {
      loaders_[k]->read_sample(sample, dst + (i - mine) * (seq_len_ + 1));
    }
  }
  samples_consumed_ += local_batch * dp_size_;
  return batch;
}

LoaderState MixtureLoader::state() const {
  LoaderState state;
  state.samples_consumed = samples_consumed_;
  // One data.path keeps the checkpoint it always wrote: its count is the global one.
  if (sources_.size() == 1 && sources_[0].name.empty()) return state;
  for (size_t k = 0; k < sources_.size(); ++k) {
    state.sources.push_back({sources_[k].name, source_samples_[k]});
  }
  return state;
}

void MixtureLoader::restore(const LoaderState& state) {
  TT_CHECK(state.samples_consumed >= 0, "loader state with ", state.samples_consumed, " samples");
  samples_consumed_ = state.samples_consumed;
  std::fill(source_samples_.begin(), source_samples_.end(), 0);
  if (state.sources.empty()) {
    for (int64_t g = 0; g < samples_consumed_; ++g) ++source_samples_[sequence_.source_of(g)];
    return;
  }
  // By name: a source added since the save starts at its beginning, one removed is dropped.
  std::map<std::string, int64_t> saved;
  for (const LoaderState::Source& s : state.sources) saved[s.name] = s.samples_consumed;
  for (size_t k = 0; k < sources_.size(); ++k) {
    auto it = saved.find(sources_[k].name);
    if (it == saved.end()) {
      notes_.push_back(detail::concat(
          sources_[k].name.empty() ? "the data" : "source '" + sources_[k].name + "'",
          " is not in the saved mixture; it starts at its first window"));
      continue;
    }
    source_samples_[k] = it->second;
    saved.erase(it);
  }
  for (const auto& [name, samples] : saved) {
    notes_.push_back(detail::concat("the saved mixture's source '", name, "' (", samples,
                                    " windows read) is no longer a source; it is dropped"));
  }
}

std::vector<std::string> MixtureLoader::take_notes() {
  std::vector<std::string> notes;
  notes.swap(notes_);
  return notes;
}

}  // namespace titan::data
