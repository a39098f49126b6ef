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
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/token_source.h"

namespace titan::data {

// Everything needed to resume sampling exactly where it stopped.
struct LoaderState {
  int64_t samples_consumed = 0;  // global samples handed out, over all dp ranks
};

class DataLoader {
 public:
  // Throws InputError naming training.seq_len when the stream is too short for one window.
  DataLoader(std::shared_ptr<const TokenSource> source, int64_t seq_len, uint64_t seed,
             int64_t dp_rank = 0, int64_t dp_size = 1);

  // This rank's next micro-batch: tokens [B, S + 1] i32, B = local_batch.
  Tensor next_batch(int64_t local_batch);

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
  int64_t windows_;
  LoaderState state_;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;  // window order of epoch perm_epoch_
};

}  // namespace titan::data
