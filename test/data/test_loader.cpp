// The data loader (data/loader.h): windows, shuffling, resumption and the data-parallel split.
//
// The source is a token file whose token at position p is p itself, so a row of a batch says
// where it came from: a genuine window i holds i·S, i·S + 1, …, i·S + S.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/byte_tokenizer.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "data/token_source.h"
#include "support/input_error.h"
#include "support/process.h"
#include "support/tensor_testing.h"
#include "support/token_sources.h"

namespace titan::data {
namespace {

using testing::input_error_message;
using testing::open_source;

// A token file of `count` tokens where token p is p, written under the test's scratch dir.
std::shared_ptr<const TokenSource> position_source(const std::string& test_name, int32_t count) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), 0);
  std::string path = testing::scratch_dir(test_name) + "/positions.bin";
  write_token_file(path, tokens, count, 4);
  return open_token_file(path);
}

// The window index of each row of a [B, S + 1] batch from a position source; CHECKs that every
// row is a genuine window: S + 1 consecutive tokens starting at a multiple of S.
std::vector<int64_t> windows_of(const Tensor& batch, int64_t seq_len, int64_t windows) {
  std::vector<int64_t> result;
  const int32_t* rows = batch.data<int32_t>();
  for (int64_t b = 0; b < batch.size(0); ++b) {
    const int32_t* row = rows + b * (seq_len + 1);
    CHECK(row[0] % seq_len == 0);
    int64_t window = row[0] / seq_len;
    CHECK(window >= 0);
    CHECK(window < windows);
    for (int64_t k = 0; k < seq_len; ++k) {
      if (row[k + 1] != row[k] + 1) {
        FAIL_CHECK("row " << b << " is not consecutive at " << k << ": " << row[k] << ", "
                          << row[k + 1]);
        break;
      }
    }
    result.push_back(window);
  }
  return result;
}

std::vector<Tensor> take_batches(DataLoader& loader, int64_t local_batch, int count) {
  std::vector<Tensor> batches;
  for (int i = 0; i < count; ++i) batches.push_back(loader.next_batch(local_batch));
  return batches;
}

// Rows of the given batches stacked in order: [ΣB, S + 1].
Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Tensor out = Tensor::empty({rows, parts.front().size(1)}, DType::I32);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    out.rows(at, at + p.size(0)).copy_from(p);
    at += p.size(0);
  }
  return out;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("DataLoader: windows_per_epoch is (N - 1) / S") {
    auto source = position_source("loader_windows", 101);
    CHECK(DataLoader(source, 8, 1).windows_per_epoch() == 12);   // 100 / 8
    CHECK(DataLoader(source, 10, 1).windows_per_epoch() == 10);  // exactly: the last target is 100
    CHECK(DataLoader(source, 100, 1).windows_per_epoch() == 1);
    CHECK(DataLoader(source, 1, 1).windows_per_epoch() == 100);
    CHECK(DataLoader(source, 8, 1).seq_len() == 8);
  }

  TEST_CASE("DataLoader: next_batch returns B x (S + 1) i32 rows that are windows of the stream") {
    const int64_t seq_len = 8;
    auto source = position_source("loader_rows", 101);
    DataLoader loader(source, seq_len, 3);
    for (int step = 0; step < 10; ++step) {
      Tensor batch = loader.next_batch(5);
      CHECK(batch.dtype() == DType::I32);
      CHECK(batch.shape() == Shape{5, seq_len + 1});
      CHECK(batch.is_contiguous());
      windows_of(batch, seq_len, loader.windows_per_epoch());
    }
    // The last window reaches the very last token: window 9 of S = 10 ends at token 100.
    DataLoader exact(source, 10, 3);
    std::set<int32_t> last_tokens;
    for (int i = 0; i < 10; ++i) last_tokens.insert(exact.next_batch(1).data<int32_t>()[10]);
    CHECK(last_tokens.count(100) == 1);
  }

  TEST_CASE("DataLoader: rows of a text source are windows of its byte tokens") {
    std::string path = testing::scratch_dir("loader_text") + "/corpus.txt";
    std::string text = "The quick brown fox jumps over the lazy dog.";
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << text;
    }
    std::vector<int32_t> stream = ByteTokenizer().encode_document(text);  // 46 tokens
    std::shared_ptr<const TokenSource> source = open_source(path, "auto");
    const int64_t seq_len = 5;
    DataLoader loader(source, seq_len, 11);
    CHECK(loader.windows_per_epoch() == 9);  // 45 / 5
    Tensor batch = loader.next_batch(9);
    std::set<int64_t> seen;
    for (int64_t b = 0; b < 9; ++b) {
      const int32_t* row = batch.data<int32_t>() + b * (seq_len + 1);
      // Find which window this is by its first token's position, then compare all of it.
      bool matched = false;
      for (int64_t w = 0; w < 9 && !matched; ++w) {
        if (std::equal(row, row + seq_len + 1, stream.begin() + w * seq_len)) {
          matched = seen.insert(w).second;
        }
      }
      CHECK_MESSAGE(matched, "row ", b, " is not an unseen window of the stream");
    }
    CHECK(seen.size() == 9);
  }

  TEST_CASE("DataLoader: the same seed gives the same batches and another seed another order") {
    auto source = position_source("loader_seed", 201);
    DataLoader a(source, 4, 1234), b(source, 4, 1234), c(source, 4, 1235);
    bool any_difference = false;
    for (int step = 0; step < 20; ++step) {
      Tensor ta = a.next_batch(3), tb = b.next_batch(3), tc = c.next_batch(3);
      CHECK(testing::bitwise_equal(ta, tb));
      any_difference = any_difference || !testing::bitwise_equal(ta, tc);
    }
    CHECK(any_difference);
  }

  TEST_CASE("DataLoader: every epoch visits every window exactly once in a shuffled order") {
    const int64_t seq_len = 8;
    auto source = position_source("loader_epoch", 101);
    DataLoader loader(source, seq_len, 5);
    const int64_t n = loader.windows_per_epoch();
    std::vector<std::vector<int64_t>> orders;
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i) {
        order.push_back(windows_of(loader.next_batch(1), seq_len, n).at(0));
      }
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), int64_t{0});
      CHECK(sorted == all);
      orders.push_back(order);
    }
    // Shuffled (not the identity), and differently in each epoch: 12! orders make a chance
    // collision negligible, and the seed is fixed.
    std::vector<int64_t> identity(static_cast<size_t>(n));
    std::iota(identity.begin(), identity.end(), int64_t{0});
    CHECK(orders[0] != identity);
    CHECK(orders[0] != orders[1]);
    CHECK(orders[1] != orders[2]);
  }

  TEST_CASE("DataLoader: batches that straddle epoch boundaries still cover each epoch exactly") {
    // 12 windows in batches of 5: 12 batches are 60 samples, 5 full epochs.
    const int64_t seq_len = 8;
    auto source = position_source("loader_straddle", 101);
    DataLoader loader(source, seq_len, 9);
    const int64_t n = loader.windows_per_epoch();
    std::vector<int64_t> samples;
    for (int step = 0; step < 12; ++step) {
      for (int64_t w : windows_of(loader.next_batch(5), seq_len, n)) samples.push_back(w);
    }
    REQUIRE(samples.size() == 60);
    for (int epoch = 0; epoch < 5; ++epoch) {
      std::set<int64_t> seen(samples.begin() + epoch * n, samples.begin() + (epoch + 1) * n);
      CHECK(seen.size() == static_cast<size_t>(n));
    }
    CHECK(loader.state().samples_consumed == 60);
  }

  TEST_CASE("DataLoader: a loader restored from a saved state continues with the same batches") {
    auto source = position_source("loader_restore", 101);
    DataLoader original(source, 8, 77);
    take_batches(original, 5, 3);
    LoaderState saved = original.state();
    CHECK(saved.samples_consumed == 15);
    std::vector<Tensor> expected = take_batches(original, 5, 6);  // crosses into later epochs

    SUBCASE("into a fresh loader") {
      DataLoader resumed(source, 8, 77);
      resumed.restore(saved);
      CHECK(resumed.state().samples_consumed == 15);
      std::vector<Tensor> got = take_batches(resumed, 5, 6);
      for (size_t i = 0; i < got.size(); ++i) CHECK(testing::bitwise_equal(got[i], expected[i]));
    }
    SUBCASE("into a loader that has already moved on to another epoch") {
      DataLoader resumed(source, 8, 77);
      take_batches(resumed, 7, 10);  // 70 samples: epoch 5, its own shuffle cached
      resumed.restore(saved);
      std::vector<Tensor> got = take_batches(resumed, 5, 6);
      for (size_t i = 0; i < got.size(); ++i) CHECK(testing::bitwise_equal(got[i], expected[i]));
    }
    SUBCASE("the original itself, rewound") {
      original.restore(saved);
      std::vector<Tensor> got = take_batches(original, 5, 6);
      for (size_t i = 0; i < got.size(); ++i) CHECK(testing::bitwise_equal(got[i], expected[i]));
    }
    CHECK_THROWS_AS(original.restore(LoaderState{-1}), Error);
  }

  TEST_CASE("DataLoader: the dp ranks' batches of a micro-step concatenate to the dp=1 batch") {
    const int64_t seq_len = 4, local_batch = 3;
    auto source = position_source("loader_dp", 101);  // 25 windows: steps straddle epochs
    for (int64_t dp : {2, 4}) {
      CAPTURE(dp);
      DataLoader whole(source, seq_len, 2024);
      std::vector<DataLoader> ranks;
      for (int64_t r = 0; r < dp; ++r) ranks.emplace_back(source, seq_len, 2024, r, dp);
      for (int step = 0; step < 12; ++step) {
        CAPTURE(step);
        Tensor global = whole.next_batch(local_batch * dp);
        std::vector<Tensor> parts;
        for (DataLoader& rank : ranks) parts.push_back(rank.next_batch(local_batch));
        CHECK(testing::bitwise_equal(concat_rows(parts), global));
      }
      // Every rank counts the global samples, so any rank's state resumes the whole job.
      for (const DataLoader& rank : ranks) {
        CHECK(rank.state().samples_consumed == whole.state().samples_consumed);
      }
    }
  }

  TEST_CASE("DataLoader: bad arguments") {
    auto source = position_source("loader_errors", 101);
    // The caller names the keys in the messages: titan_train its config's.
    const LoaderKeys keys{"data.path", "training.seq_len"};
    std::string message = input_error_message([&] { DataLoader(source, 101, 1, 0, 1, keys); });
    CHECK(message.find("training.seq_len") != std::string::npos);
    CHECK(message.find("101") != std::string::npos);
    CHECK(message.find("use a larger data.path") != std::string::npos);
    CHECK(input_error_message([&] {
            DataLoader(source, 1000, 1, 0, 1, keys);
          }).find("training.seq_len") != std::string::npos);
    CHECK(input_error_message([&] { DataLoader(source, 0, 1, 0, 1, keys); })
              .find("training.seq_len") != std::string::npos);
    // Without names from its caller, the loader names its own arguments, never a config key.
    message = input_error_message([&] { DataLoader(source, 101, 1); });
    CHECK(message.find("seq_len: 101 needs at least 102 tokens") == 0);
    CHECK(message.find("training.") == std::string::npos);
    CHECK_THROWS_AS(DataLoader(source, 8, 1, 2, 2), Error);  // rank outside the dp group
    CHECK_THROWS_AS(DataLoader(source, 8, 1, 0, 0), Error);
    CHECK_THROWS_AS(DataLoader(nullptr, 8, 1), Error);
    DataLoader loader(source, 8, 1);
    CHECK_THROWS_AS(loader.next_batch(0), Error);
  }

}  // TEST_SUITE("fast")

}  // namespace titan::data

namespace titan::data {

TEST_SUITE("fast") {

TEST_CASE("loader refuses tokens beyond the vocabulary the file's header declares") {
  std::string path = testing::scratch_dir("loader_vocab") + "/lying.bin";
  std::vector<int32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_token_file(path, tokens, 64, 2);
  {
    // Rewrite the header's vocab size (offset 24) to 10: ids 10..63 now exceed it.
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(24);
    const char vocab_10[8] = {10, 0, 0, 0, 0, 0, 0, 0};
    file.write(vocab_10, 8);
  }
  DataLoader loader(open_token_file(path), 8, 0);
  CHECK_THROWS_WITH_AS(loader.next_batch(7), doctest::Contains("outside the vocabulary its header declares (10)"),
                       InputError);
}

}  // TEST_SUITE

}  // namespace titan::data
