// Sharded token streams (data/token_shards.h), what growing one at its end does to the loader's
// order (data/loader.h), and the fixed-order validation reader.
//
// Shards hold consecutive "positions" (token p is p, offset per shard), so a token read back
// says where in the stream it came from. Every test writes under its own scratch directory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "data/token_shards.h"
#include "data/token_source.h"
#include "support/input_error.h"
#include "support/process.h"
#include "support/tensor_testing.h"
#include "support/token_sources.h"

namespace titan::data {
namespace {

using testing::input_error_message;
using testing::open_source;
using testing::read_all;

namespace fs = std::filesystem;

// A fresh, empty folder for one test.
std::string fresh_dir(const std::string& test_name) {
  const std::string dir = testing::scratch_dir(test_name);
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) fs::remove_all(entry);
  return dir;
}

// Writes tokens first, first + 1, …, first + count − 1 as a shard.
void write_positions(const std::string& path, int32_t first, int32_t count, int64_t vocab,
                     int token_bytes = 4) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  write_token_file(path, tokens, vocab, token_bytes);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The window each row of a [B, S + 1] batch of a position stream starts at.
std::vector<int64_t> row_windows(const Tensor& batch, int64_t seq_len) {
  std::vector<int64_t> windows;
  for (int64_t b = 0; b < batch.size(0); ++b) {
    const int32_t* row = batch.data<int32_t>() + b * (seq_len + 1);
    for (int64_t k = 0; k < seq_len; ++k) REQUIRE(row[k + 1] == row[k] + 1);
    REQUIRE(row[0] % seq_len == 0);
    windows.push_back(row[0] / seq_len);
  }
  return windows;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("token shards: a folder's .bin files are one stream in name order") {
    const std::string dir = fresh_dir("shards_folder");
    // Written out of order, with an empty shard, a file that is not .bin and a folder that is
    // named like one: neither of the last two is a shard.
    write_positions(dir + "/shard_00002.bin", 30, 25, 1000);
    write_positions(dir + "/shard_00000.bin", 0, 10, 1000, 2);
    write_positions(dir + "/shard_00001.bin", 10, 20, 1000);
    write_positions(dir + "/shard_00003.bin", 55, 0, 1000);
    write_positions(dir + "/shard_00004.bin", 55, 7, 1000);
    std::ofstream(dir + "/README.txt") << "not a shard";
    fs::create_directories(dir + "/old.bin");

    const std::vector<std::string> paths = list_token_shards(dir, "data.path");
    REQUIRE(paths.size() == 5);
    for (size_t k = 0; k < paths.size(); ++k) {
      CHECK(fs::path(paths[k]).filename() == "shard_0000" + std::to_string(k) + ".bin");
    }

    for (const char* format : {"auto", "bin"}) {
      std::unique_ptr<TokenSource> source = open_source(dir, format);
      REQUIRE(source->size() == 62);
      std::vector<int32_t> expected(62);
      std::iota(expected.begin(), expected.end(), 0);
      CHECK(read_all(*source) == expected);
      // Every read, whichever shards it crosses (the empty one included), gives the positions.
      for (int64_t start = 0; start <= 62; ++start) {
        for (int64_t count = 0; start + count <= 62; ++count) {
          std::vector<int32_t> got(static_cast<size_t>(count));
          source->read(start, count, got.data());
          for (int64_t i = 0; i < count; ++i) REQUIRE(got[i] == start + i);
        }
      }
      CHECK(contains(source->describe(), "5 shards shard_00000.bin … shard_00004.bin"));
      CHECK(contains(source->describe(), "62 tokens"));
    }
    TokenShards direct(dir, paths, "data.path");
    CHECK(direct.shard_count() == 5);
    CHECK(direct.shard_start(2) == 30);
    CHECK(direct.shard_start(4) == 55);
  }

  TEST_CASE("token shards: a glob takes the files it matches — in byte order") {
    const std::string dir = fresh_dir("shards_glob");
    write_positions(dir + "/part_b.bin", 4, 4, 100);
    write_positions(dir + "/part_a.bin", 0, 4, 100);
    write_positions(dir + "/part_c.bin", 8, 4, 100);
    write_positions(dir + "/other_a.bin", 500, 4, 1000);  // not matched
    write_positions(dir + "/part_B.bin", 900, 4, 1000);   // 'B' sorts before 'a'
    fs::create_directories(dir + "/part_d.bin");          // a folder: matched but not a file

    std::unique_ptr<TokenSource> source = open_source(dir + "/part_[a-c].bin", "auto");
    CHECK(read_all(*source) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    CHECK(source->vocab_bound() == 100);

    const std::vector<std::string> all = list_token_shards(dir + "/part_*.bin", "data.path");
    REQUIRE(all.size() == 4);
    CHECK(fs::path(all[0]).filename() == "part_B.bin");
    CHECK(fs::path(all[1]).filename() == "part_a.bin");
    CHECK(fs::path(all[3]).filename() == "part_c.bin");
    CHECK(open_source(dir + "/part_?.bin", "auto")->size() == 16);

    // One file is a stream of one shard; a literal file name is still read as that file.
    CHECK(open_source(dir + "/part_c*.bin", "auto")->size() == 4);
    CHECK(!names_token_shards(dir + "/part_c.bin"));
    CHECK(names_token_shards(dir + "/part_*.bin"));
    CHECK(names_token_shards(dir));
  }

  TEST_CASE("token shards: the vocab bound is the largest any shard declares") {
    const std::string dir = fresh_dir("shards_vocab");
    write_positions(dir + "/s0.bin", 0, 8, 300, 2);
    write_positions(dir + "/s1.bin", 0, 8, 70000, 4);
    write_positions(dir + "/s2.bin", 0, 8, 500, 2);
    std::unique_ptr<TokenSource> source = open_source(dir, "auto");
    CHECK(source->vocab_bound() == 70000);
    CHECK(contains(source->describe(), "vocab 70000"));
    // Every shard's ids stay below its own header's vocab, so the loader's check passes.
    DataLoader loader(std::move(source), 4, 0);
    for (int i = 0; i < 6; ++i) loader.next_batch(1);
  }

  TEST_CASE("token shards: an empty glob or folder and a bad shard are InputErrors naming both") {
    const std::string dir = fresh_dir("shards_errors");

    std::string empty_glob = input_error_message([&] { open_source(dir + "/*.bin", "auto"); });
    CHECK(contains(empty_glob, "data.path"));
    CHECK(contains(empty_glob, dir + "/*.bin"));
    CHECK(contains(empty_glob, "matches no file"));

    std::ofstream(dir + "/notes.txt") << "text";
    std::string empty_folder = input_error_message([&] { open_source(dir, "auto"); });
    CHECK(contains(empty_folder, "data.path"));
    CHECK(contains(empty_folder, "'" + dir + "'"));
    CHECK(contains(empty_folder, "holds no .bin token files"));

    write_positions(dir + "/s0.bin", 0, 8, 100);
    std::ofstream(dir + "/s1.bin") << std::string(100, 'x');  // long enough, no magic
    write_positions(dir + "/s2.bin", 8, 8, 100);
    std::string bad = input_error_message([&] { open_source(dir, "auto"); });
    CHECK(contains(bad, "data.path"));
    CHECK(contains(bad, dir + "/s1.bin"));
    CHECK(contains(bad, "no TTTOKENS header"));
    CHECK(contains(bad, "shard 2 of 3"));

    // A truncated shard: its header promises more tokens than it holds.
    fs::remove(dir + "/s1.bin");
    write_positions(dir + "/s1.bin", 0, 8, 100);
    fs::resize_file(dir + "/s1.bin", fs::file_size(dir + "/s1.bin") - 4);
    std::string truncated = input_error_message([&] { open_source(dir + "/s*.bin", "auto"); });
    CHECK(contains(truncated, dir + "/s1.bin"));
    CHECK(contains(truncated, "truncated"));

    // The key is the one the path came from; text cannot be sharded.
    std::string validation =
        input_error_message([&] { open_source(dir, "auto", "validation.dataset_path"); });
    CHECK(contains(validation, "validation.dataset_path"));
    CHECK(!contains(validation, "data.path"));
    std::string missing = input_error_message(
        [&] { open_source(dir + "/nope.bin", "auto", "validation.dataset_path"); });
    CHECK(contains(missing, "validation.dataset_path: '" + dir + "/nope.bin' does not exist"));
    std::string text = input_error_message([&] { open_source(dir, "text"); });
    CHECK(contains(text, "data.format is text"));
  }

  TEST_CASE("token shards: shards added at the end keep every window of the old stream") {
    const std::string dir = fresh_dir("shards_growth");
    const int64_t seq_len = 4;
    write_positions(dir + "/shard_00000.bin", 0, 37, 1 << 20);
    write_positions(dir + "/shard_00001.bin", 37, 40, 1 << 20);
    std::shared_ptr<const TokenSource> old_stream = open_source(dir, "auto");
    DataLoader old_loader(old_stream, seq_len, 5);
    const int64_t n = old_loader.windows_per_epoch();  // 76 / 4 = 19

    write_positions(dir + "/shard_00002.bin", 77, 50, 1 << 20);
    write_positions(dir + "/shard_00003.bin", 127, 60, 1 << 20);
    std::shared_ptr<const TokenSource> grown = open_source(dir, "auto");
    DataLoader grown_loader(grown, seq_len, 5);
    const int64_t n_grown = grown_loader.windows_per_epoch();  // 186 / 4 = 46
    REQUIRE(n == 19);
    REQUIRE(n_grown == 46);
    // Window i is the same tokens in both streams: the old last window is complete in both.
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> a(seq_len + 1), b(seq_len + 1);
      read_window(*old_stream, i, seq_len, a.data(), "data.path");
      read_window(*grown, i, seq_len, b.data(), "data.path");
      CHECK(a == b);
    }
  }

  TEST_CASE(
      "epoch order: growth keeps each old slot or gives it a new window — old ones move to the "
      "end") {
    for (uint64_t seed : {0ULL, 7ULL, 12345ULL}) {
      for (int64_t epoch : {0, 1, 9}) {
        for (auto [n, n_grown] : {std::pair<int64_t, int64_t>{1, 2},
                                  {19, 46},
                                  {1000, 1013},
                                  {1000, 3000},
                                  {257, 257}}) {
          CAPTURE(seed);
          CAPTURE(epoch);
          CAPTURE(n);
          CAPTURE(n_grown);
          const std::vector<int64_t> before = epoch_order(seed, epoch, n);
          const std::vector<int64_t> after = epoch_order(seed, epoch, n_grown);
          std::vector<int64_t> sorted = after;
          std::sort(sorted.begin(), sorted.end());
          std::vector<int64_t> all(static_cast<size_t>(n_grown));
          std::iota(all.begin(), all.end(), 0);
          REQUIRE(sorted == all);  // a permutation
          std::set<int64_t> displaced;
          int64_t replaced = 0;
          for (int64_t p = 0; p < n; ++p) {
            if (after[p] == before[p]) continue;
            REQUIRE(after[p] >= n);  // an old slot holds its old window or a new one
            displaced.insert(before[p]);
            ++replaced;
          }
          // The displaced old windows are exactly the old ones in the new slots.
          std::set<int64_t> old_in_tail;
          for (int64_t p = n; p < n_grown; ++p) {
            if (after[p] < n) old_in_tail.insert(after[p]);
          }
          CHECK(old_in_tail == displaced);
          if (n == 1000 && n_grown == 3000) {
            // About n·(n' − n)/n' = 667 slots change, as in any uniform order.
            CHECK(replaced > 600);
            CHECK(replaced < 730);
          }
          if (n == n_grown) CHECK(after == before);
        }
      }
    }
  }

  TEST_CASE(
      "DataLoader: resumed on a grown stream in the same epoch — it skips no unseen old window") {
    const std::string dir = fresh_dir("shards_resume_grown");
    const int64_t seq_len = 4, batch = 3;
    write_positions(dir + "/shard_00000.bin", 0, 201, 1 << 20);  // 50 windows
    std::shared_ptr<const TokenSource> old_stream = open_source(dir, "auto");
    DataLoader before(old_stream, seq_len, 99);
    const int64_t n = before.windows_per_epoch();
    REQUIRE(n == 50);
    std::vector<int64_t> seen;
    for (int i = 0; i < 10; ++i) {
      for (int64_t w : row_windows(before.next_batch(batch), seq_len)) seen.push_back(w);
    }
    const LoaderState saved = before.state();
    REQUIRE(saved.samples_consumed == 30);

    write_positions(dir + "/shard_00001.bin", 201, 80, 1 << 20);  // 70 windows in all
    DataLoader after(open_source(dir, "auto"), seq_len, 99);
    const int64_t n_grown = after.windows_per_epoch();
    REQUIRE(n_grown == 70);
    after.restore(saved);
    std::vector<int64_t> rest;
    while (after.state().samples_consumed + batch <= n_grown) {
      for (int64_t w : row_windows(after.next_batch(batch), seq_len)) rest.push_back(w);
    }
    // The remaining samples of epoch 0, one by one, so that none of epoch 1 is counted.
    while (after.state().samples_consumed < n_grown) {
      for (int64_t w : row_windows(after.next_batch(1), seq_len)) rest.push_back(w);
    }
    REQUIRE(static_cast<int64_t>(rest.size()) == n_grown - saved.samples_consumed);

    const std::set<int64_t> seen_set(seen.begin(), seen.end());
    std::map<int64_t, int> visits;
    for (int64_t w : rest) ++visits[w];
    int64_t repeated = 0, deferred_new = 0;
    for (int64_t w = 0; w < n; ++w) {
      if (!seen_set.count(w)) CHECK_MESSAGE(visits[w] == 1, "old window " << w << " skipped");
      if (seen_set.count(w) && visits[w] > 0) ++repeated;
    }
    for (int64_t w = n; w < n_grown; ++w) deferred_new += visits[w] == 0;
    // Each old window seen again stands for a new window whose slot was already consumed.
    CHECK(repeated == deferred_new);
    // The epoch's order is the grown stream's own: a fresh run would visit the same windows.
    const std::vector<int64_t> order = epoch_order(99, 0, n_grown);
    CHECK(std::equal(rest.begin(), rest.end(), order.begin() + saved.samples_consumed));
    MESSAGE("grown 50 -> 70 windows after 30 samples: " << repeated
                                                        << " seen windows repeat, as many new "
                                                           "ones wait for epoch 1");
  }

  TEST_CASE("DataLoader: a state from a longer stream resumes on any stream without failing") {
    const std::string dir = fresh_dir("shards_resume_any");
    write_positions(dir + "/s0.bin", 0, 41, 1 << 20);
    DataLoader loader(open_source(dir, "auto"), 4, 3);  // 10 windows
    loader.restore(LoaderState{1234567});
    CHECK(row_windows(loader.next_batch(5), 4).size() == 5);
    CHECK(loader.state().samples_consumed == 1234572);
  }

  TEST_CASE("FixedOrderLoader: the same batches in stream order every time — split over dp ranks") {
    const std::string dir = fresh_dir("fixed_order");
    write_positions(dir + "/s0.bin", 0, 30, 1 << 20);
    write_positions(dir + "/s1.bin", 30, 23, 1 << 20);  // 52 / 4 = 13 windows
    std::shared_ptr<const TokenSource> source = open_source(dir, "auto");
    const int64_t seq_len = 4;
    FixedOrderLoader whole(source, seq_len, 0, 1, "validation.dataset_path", "validation.seq_len");
    CHECK(whole.windows() == 13);
    // Global batch k of 4 is windows 4k .. 4k + 3, modulo 13.
    CHECK(row_windows(whole.batch(0, 4), seq_len) == std::vector<int64_t>{0, 1, 2, 3});
    CHECK(row_windows(whole.batch(2, 4), seq_len) == std::vector<int64_t>{8, 9, 10, 11});
    CHECK(row_windows(whole.batch(3, 4), seq_len) == std::vector<int64_t>{12, 0, 1, 2});
    CHECK(testing::bitwise_equal(whole.batch(1, 4), whole.batch(1, 4)));
    for (int64_t dp : {2, 4}) {
      for (int64_t k = 0; k < 5; ++k) {
        Tensor global = whole.batch(k, 4);
        for (int64_t r = 0; r < dp; ++r) {
          FixedOrderLoader rank(source, seq_len, r, dp, "validation.dataset_path",
                                "validation.seq_len");
          CHECK(testing::bitwise_equal(rank.batch(k, 4 / dp),
                                       global.rows(r * (4 / dp), (r + 1) * (4 / dp))));
        }
      }
    }
    std::string too_long = input_error_message([&] {
      FixedOrderLoader(source, 60, 0, 1, "validation.dataset_path", "validation.seq_len");
    });
    CHECK(contains(too_long, "validation.seq_len: 60 needs at least 61 tokens"));
    CHECK(contains(too_long, "validation.dataset_path"));
  }
}

}  // namespace titan::data
