// A mixture of token streams: every training window is drawn from one source, chosen with
// probability proportional to its weight, and the sources' own loaders (loader.h) give the
// windows.
//
// Which source window g comes from is a pure function of (g, weights, seed): the golden-ratio
// Weyl sequence u_g = (offset + g·⌊2^64/φ⌋) mod 2^64, offset drawn once from the seed, falls in
// source k's share [c_{k-1}, c_k) of [0, 2^64), c_k = 2^64 · (w_0 + … + w_k) / Σw. It is a
// low-discrepancy sequence: over any N consecutive windows each source's count is within
// O(log N) of N·w_k/Σw, so even a short run gets the weights, and the integers make it the same
// on every rank and every build. Every rank walks the whole global sequence, so every mesh sees
// the same global windows as one rank, exactly as DataLoader's samples.
//
// Source k's n-th window is its DataLoader's sample n (its own epochs under the seed); a
// source whose windows run out starts its next epoch. A mixture of one source is its
// DataLoader, window for window.
//
// The state is the count of global windows handed out (which source is next) and each
// source's own count, by name. The counts are saved rather than derived so that a resumed run
// whose weights changed continues each source where it stopped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/loader.h"
#include "data/token_source.h"

namespace titan::data {

// The source of each global window under `weights` (each positive and finite) and `seed`.
class WindowSourceSequence {
 public:
  WindowSourceSequence(const std::vector<double>& weights, uint64_t seed);
  int64_t source_of(int64_t window) const;
  int64_t sources() const { return static_cast<int64_t>(bounds_.size()); }

 private:
  uint64_t offset_;
  std::vector<uint64_t> bounds_;  // [sources]: source k takes u < bounds_[k]; the last takes all
};

struct MixtureSource {
  std::string name;  // "" for the single source of data.path
  std::shared_ptr<const TokenSource> tokens;
  double weight = 1;
  std::string path_key;  // the caller's name for where it came from: "data.sources[1].path"
};

class MixtureLoader final : public WindowBatches {
 public:
  // InputError naming a source's path_key or `seq_len_key` when a source is too short for one
  // window (DataLoader's check).
  MixtureLoader(std::vector<MixtureSource> sources, int64_t seq_len, uint64_t seed, int64_t dp_rank,
                int64_t dp_size, const char* seq_len_key);

  Tensor next_batch(int64_t local_batch) override;

  // The global state, the same on every rank. restore() takes each source's count by name;
  // a state without them (a checkpoint of one data.path) replays the sequence up to its
  // global count, which for one source is that count. A source missing from the state starts
  // at its first window; one the mixture lacks is dropped (take_notes says so).
  LoaderState state() const;
  void restore(const LoaderState& state);

  int64_t sources() const { return static_cast<int64_t>(sources_.size()); }
  const std::string& name(int64_t k) const { return sources_.at(k).name; }
  int64_t source_samples(int64_t k) const { return source_samples_.at(k); }
  int64_t windows_per_epoch(int64_t k) const { return loaders_.at(k)->windows_per_epoch(); }
  int64_t seq_len() const { return seq_len_; }
  const TokenSource& tokens(int64_t k) const { return *sources_.at(k).tokens; }

  // What the caller should log, once each, since the last call: a source that started a new
  // epoch ("source 'web' ran out of its 120 windows; starting its epoch 2"), and after a
  // restore, a source the state did not name (it starts at its first window) or a source of
  // the state the mixture no longer has.
  std::vector<std::string> take_notes();

 private:
  std::vector<MixtureSource> sources_;
  std::vector<std::unique_ptr<DataLoader>> loaders_;  // one per source, read by sample
  WindowSourceSequence sequence_;
  int64_t seq_len_;
  int64_t dp_rank_, dp_size_;
  int64_t samples_consumed_ = 0;
  std::vector<int64_t> source_samples_;  // [sources]
  std::vector<std::string> notes_;
};

}  // namespace titan::data
