// Data-parallel sampling of training windows, deterministic from the seed, resumable from one
// integer.
//
// The token stream is cut into windows of S + 1 tokens (window i starts at token i·S; the extra
// token is the last target), and every epoch visits all windows in an order shuffled by the
// counter-based RNG under the seed. Global sample g is window perm_epoch(g / n)[g % n].
// Each micro-batch takes the next B·dp samples of that global sequence and hands dp rank r the
// samples [r·B, (r+1)·B) of it, so the union over ranks of one optimizer step is the same
// global batch for every data-parallel degree, and the loss of a step does not depend on the
// mesh. Tensor-parallel ranks of one dp rank ask with the same dp rank and get the same tokens.
//
// A stream that grew at its end (token_shards.h: shards appended) keeps its windows, and the
// shuffle is built so that growth disturbs an epoch's order as little as one integer of state
// allows: the Fisher–Yates swap at index i draws from the counter RNG at (seed, epoch, i) alone,
// never from the window count. Epoch e's order over n' > n windows is therefore its order over
// n with new windows in some of the first n slots (a share (n' − n)/n' of them, as in any
// uniform order) and the old windows they displaced in the new slots [n, n') at the epoch's end.
// A run resumed on the grown stream in the same epoch skips none of the old windows it had not
// yet seen. docs/data.md states the whole guarantee; the window count is not part of the
// state, so a resume never fails.
//
// FixedOrderLoader reads held-out data for validation: the same batches, in stream order,
// every time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/token_source.h"

namespace titan::data {

// Copies window `window` (S + 1 tokens from token window·S) of `source` into `row`; InputError
// naming `path_key` when a token lies outside the source's declared vocabulary.
void read_window(const TokenSource& source, int64_t window, int64_t seq_len, int32_t* row,
                 const char* path_key);

// Everything needed to resume sampling exactly where it stopped.
struct LoaderState {
  // A mixture's (mixture.h): each source's own samples, by name; empty for one data.path.
  struct Source {
    std::string name;
    int64_t samples_consumed = 0;
  };
  LoaderState() = default;
  LoaderState(int64_t samples, std::vector<Source> per_source = {})  // LoaderState{n}
      : samples_consumed(samples), sources(std::move(per_source)) {}

  int64_t samples_consumed = 0;  // global samples handed out, over all dp ranks
  std::vector<Source> sources;
};

// The caller's names for where the tokens and the window length came from, for its messages
// (titan_train: data.path, training.seq_len). The defaults name the loader's own arguments.
struct LoaderKeys {
  const char* path = "source";
  const char* seq_len = "seq_len";
};

// What a training step draws its micro-batches from: one stream's DataLoader, or a mixture
// (mixture.h).
class WindowBatches {
 public:
  virtual ~WindowBatches() = default;
  // This rank's next micro-batch: tokens [B, S + 1] i32, B = local_batch.
  virtual Tensor next_batch(int64_t local_batch) = 0;
};

class DataLoader final : public WindowBatches {
 public:
  // Throws InputError naming keys.seq_len when seq_len is not positive or the stream is too
  // short for one window, and keys.path (in next_batch) for a token outside the vocabulary.
  DataLoader(std::shared_ptr<const TokenSource> source, int64_t seq_len, uint64_t seed,
             int64_t dp_rank = 0, int64_t dp_size = 1, LoaderKeys keys = {});

  Tensor next_batch(int64_t local_batch) override;

  // Global sample `sample` of this loader's sequence into `row` (S + 1 tokens), whatever the
  // state: what a mixture asks of each of its sources.
  void read_sample(int64_t sample, int32_t* row);

  int64_t windows_per_epoch() const { return windows_; }
  int64_t seq_len() const { return seq_len_; }
  LoaderState state() const { return state_; }
  void restore(const LoaderState& state);

 private:
  int64_t window_of_sample(int64_t sample);

  std::shared_ptr<const TokenSource> source_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t dp_rank_, dp_size_;
  LoaderKeys keys_;
  int64_t windows_;
  LoaderState state_;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;  // window order of epoch perm_epoch_
};

// The window order of epoch `epoch` over `windows` windows under `seed`: slot p of the epoch
// holds window result[p]. What DataLoader visits; public for the tests of its growth property.
std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, int64_t windows);

// Held-out windows in a fixed order, for validation: batch k of the global sequence is windows
// [k·G, (k+1)·G) of the stream, G = B·dp, each taken modulo the windows the stream holds (a
// request beyond the end starts again from window 0); dp rank r gets the B windows from
// k·G + r·B. Batch k is the same tokens every time it is asked for, and its union over the dp
// ranks is the same global batch on every mesh, as in training. No state.
class FixedOrderLoader {
 public:
  // Throws InputError naming `seq_len_key` when the stream is too short for one window, and
  // `path_key` (in batch()) for a token outside the source's vocabulary.
  FixedOrderLoader(std::shared_ptr<const TokenSource> source, int64_t seq_len, int64_t dp_rank,
                   int64_t dp_size, const char* path_key, const char* seq_len_key);

  // This rank's part of global batch `index`: tokens [B, S + 1] i32, B = local_batch.
  Tensor batch(int64_t index, int64_t local_batch) const;

  int64_t windows() const { return windows_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  int64_t seq_len_;
  int64_t dp_rank_, dp_size_;
  int64_t windows_;
  const char* path_key_;
};

}  // namespace titan::data
