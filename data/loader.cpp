#include "data/loader.h"

#include <numeric>
#include <string>

#include "core/check.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace titan::data {

DataLoader::DataLoader(std::shared_ptr<const TokenSource> source, int64_t seq_len, uint64_t seed,
                       int64_t dp_rank, int64_t dp_size)
    : source_(std::move(source)),
      seq_len_(seq_len),
      seed_(seed),
      dp_rank_(dp_rank),
      dp_size_(dp_size) {
  TT_CHECK(source_ != nullptr, "DataLoader needs a token source");
  TT_CHECK(dp_size_ >= 1 && dp_rank_ >= 0 && dp_rank_ < dp_size_, "DataLoader: dp rank ", dp_rank_,
           " of ", dp_size_);
  if (seq_len_ <= 0) input_error("training.seq_len: must be positive, got ", seq_len_);
  windows_ = (source_->size() - 1) / seq_len_;
  if (windows_ < 1) {
    input_error("training.seq_len: ", seq_len_, " needs at least ", seq_len_ + 1, " tokens but ",
                source_->describe(), " holds ", source_->size(),
                "; lower training.seq_len or use a larger data.path");
  }
}

void DataLoader::restore(const LoaderState& state) {
  TT_CHECK(state.samples_consumed >= 0, "loader state with ", state.samples_consumed, " samples");
  state_ = state;
}

int64_t DataLoader::window_of_sample(int64_t sample) {
  int64_t epoch = sample / windows_;
  if (epoch != perm_epoch_) {
    // Fisher–Yates driven by the counter RNG: epoch e's order is a pure function of (seed, e).
    CounterRng rng(seed_, "data.shuffle.epoch" + std::to_string(epoch));
    perm_.resize(windows_);
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    for (int64_t i = windows_ - 1; i > 0; --i) {
      int64_t j =
          static_cast<int64_t>(rng.bits64(static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
      std::swap(perm_[i], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[sample % windows_];
}

Tensor DataLoader::next_batch(int64_t local_batch) {
  TT_CHECK(local_batch > 0, "next_batch: local batch ", local_batch);
  profiler::Span span("data.next_batch", "data");
  Tensor batch = Tensor::empty({local_batch, seq_len_ + 1}, DType::I32);
  int32_t* dst = batch.data<int32_t>();
  int64_t first = state_.samples_consumed + dp_rank_ * local_batch;
  for (int64_t b = 0; b < local_batch; ++b) {
    int64_t window = window_of_sample(first + b);
    int32_t* row = dst + b * (seq_len_ + 1);
    source_->read(window * seq_len_, seq_len_ + 1, row);
    // A token file whose header understates its vocabulary would otherwise train on ids the
    // embedding and the loss silently treat as belonging to another vocab shard.
    for (int64_t i = 0; i <= seq_len_; ++i) {
      if (row[i] < 0 || row[i] >= source_->vocab_bound()) {
        input_error("data.path: token ", row[i], " at position ", window * seq_len_ + i, " of ",
                    source_->describe(), " is outside the vocabulary its header declares (",
                    source_->vocab_bound(), "); the file is corrupt, write it again");
      }
    }
  }
  state_.samples_consumed += local_batch * dp_size_;
  return batch;
}

}  // namespace titan::data
