#include "data/loader.h"

#include <numeric>
#include <string>

#include "core/check.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "data/token_file.h"

namespace titan::data {

DataLoader::DataLoader(std::shared_ptr<const TokenSource> source, int64_t seq_len, uint64_t seed,
                       int64_t dp_rank, int64_t dp_size, LoaderKeys keys)
    : source_(std::move(source)),
      seq_len_(seq_len),
      seed_(seed),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      keys_(keys) {
  TT_CHECK(source_ != nullptr, "DataLoader needs a token source");
  TT_CHECK(dp_size_ >= 1 && dp_rank_ >= 0 && dp_rank_ < dp_size_, "DataLoader: dp rank ", dp_rank_,
           " of ", dp_size_);
  if (seq_len_ <= 0) input_error(keys_.seq_len, ": must be positive, got ", seq_len_);
  windows_ = (source_->size() - 1) / seq_len_;
  if (windows_ < 1) {
    // + 1 in uint64: a seq_len of 2^63 - 1 must not print a negative count.
    input_error(keys_.seq_len, ": ", seq_len_, " needs at least ",
                static_cast<uint64_t>(seq_len_) + 1, " tokens but ", source_->describe(),
                " holds ", source_->size(), "; lower ", keys_.seq_len, " or use a larger ",
                keys_.path);
  }
}

void DataLoader::restore(const LoaderState& state) {
  TT_CHECK(state.samples_consumed >= 0, "loader state with ", state.samples_consumed, " samples");
  state_ = state;
}

std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, int64_t windows) {
  // Fisher–Yates driven by the counter RNG: epoch e's order is a pure function of (seed, e), and
  // the draw at index i does not depend on the window count (the growth property in loader.h).
  CounterRng rng(seed, "data.shuffle.epoch" + std::to_string(epoch));
  std::vector<int64_t> order(static_cast<size_t>(windows));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = windows - 1; i > 0; --i) {
    int64_t j =
        static_cast<int64_t>(rng.bits64(static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

void read_window(const TokenSource& source, int64_t window, int64_t seq_len, int32_t* row,
                 const char* path_key) {
  source.read(window * seq_len, seq_len + 1, row);
  // A token file whose header understates its vocabulary would otherwise train on ids the
  // embedding and the loss silently treat as belonging to another vocab shard. Packed
  // conversations keep their loss mask in the sign bit (token_file.h), read past here.
  const bool masked = source.packed_window() > 0;
  for (int64_t i = 0; i <= seq_len; ++i) {
    const int32_t id = masked ? token_id(row[i]) : row[i];
    if (id < 0 || id >= source.vocab_bound()) {
      input_error(path_key, ": token ", id, " at position ", window * seq_len + i, " of ",
                  source.describe(), " is outside the vocabulary its header declares (",
                  source.vocab_bound(), "); the file is corrupt, write it again");
    }
  }
}

int64_t DataLoader::window_of_sample(int64_t sample) {
  int64_t epoch = sample / windows_;
  if (epoch != perm_epoch_) {
    perm_ = epoch_order(seed_, epoch, windows_);
    perm_epoch_ = epoch;
  }
  return perm_[sample % windows_];
}

void DataLoader::read_sample(int64_t sample, int32_t* row) {
  TT_CHECK(sample >= 0, "read_sample(", sample, ")");
  read_window(*source_, window_of_sample(sample), seq_len_, row, keys_.path);
}

Tensor DataLoader::next_batch(int64_t local_batch) {
  TT_CHECK(local_batch > 0, "next_batch: local batch ", local_batch);
  profiler::Span span("data.next_batch", "data");
  Tensor batch = Tensor::empty({local_batch, seq_len_ + 1}, DType::I32);
  int32_t* dst = batch.data<int32_t>();
  int64_t first = state_.samples_consumed + dp_rank_ * local_batch;
  for (int64_t b = 0; b < local_batch; ++b) {
    read_window(*source_, window_of_sample(first + b), seq_len_, dst + b * (seq_len_ + 1),
                keys_.path);
  }
  state_.samples_consumed += local_batch * dp_size_;
  return batch;
}

FixedOrderLoader::FixedOrderLoader(std::shared_ptr<const TokenSource> source, int64_t seq_len,
                                   int64_t dp_rank, int64_t dp_size, const char* path_key,
                                   const char* seq_len_key)
    : source_(std::move(source)),
      seq_len_(seq_len),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      path_key_(path_key) {
  TT_CHECK(source_ != nullptr, "FixedOrderLoader needs a token source");
  TT_CHECK(dp_size_ >= 1 && dp_rank_ >= 0 && dp_rank_ < dp_size_, "FixedOrderLoader: dp rank ",
           dp_rank_, " of ", dp_size_);
  if (seq_len_ <= 0) input_error(seq_len_key, ": must be positive, got ", seq_len_);
  windows_ = (source_->size() - 1) / seq_len_;
  if (windows_ < 1) {
    input_error(seq_len_key, ": ", seq_len_, " needs at least ",
                static_cast<uint64_t>(seq_len_) + 1, " tokens but ",
                source_->describe(), " holds ", source_->size(), "; lower ", seq_len_key,
                " or use a larger ", path_key_);
  }
}

Tensor FixedOrderLoader::batch(int64_t index, int64_t local_batch) const {
  TT_CHECK(index >= 0 && local_batch > 0, "FixedOrderLoader::batch(", index, ", ", local_batch,
           ")");
  profiler::Span span("data.validation_batch", "data");
  Tensor batch = Tensor::empty({local_batch, seq_len_ + 1}, DType::I32);
  int32_t* dst = batch.data<int32_t>();
  const int64_t first = (index * dp_size_ + dp_rank_) * local_batch;
  for (int64_t b = 0; b < local_batch; ++b) {
    read_window(*source_, (first + b) % windows_, seq_len_, dst + b * (seq_len_ + 1), path_key_);
  }
  return batch;
}

}  // namespace titan::data
