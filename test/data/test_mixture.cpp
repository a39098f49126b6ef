// The mixture of token streams (data/mixture.h): the window-source sequence's shares, a
// mixture of one source read as its DataLoader, the same global windows on every data-parallel
// degree, and a resumed mixture giving the windows an uninterrupted one gives.
//
// The sources are token files whose token at position p is p + base (base 0 for the first
// source, 1,000,000 for the second), so a row says which source and window it came from.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/mixture.h"
#include "data/token_file.h"
#include "support/process.h"

namespace titan::data {
namespace {

std::shared_ptr<const TokenSource> ramp_source(const std::string& name, int32_t count,
                                               int32_t base) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), base);
  const std::string path = testing::scratch_dir("mixture") + "/" + name + ".bin";
  write_token_file(path, tokens, base + count, 4);
  return open_token_file(path);
}

std::vector<MixtureSource> two_sources(double wa, double wb) {
  return {{"a", ramp_source("a", 4001, 0), wa, "a.path"},
          {"b", ramp_source("b", 801, 1000000), wb, "b.path"}};
}

// Each row's first token: which source and window the row is.
std::vector<int32_t> firsts(const Tensor& batch) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b < batch.size(0); ++b) {
    out.push_back(batch.data<int32_t>()[b * batch.size(1)]);
  }
  return out;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("mixture: weights 0.7 and 0.3 give each source its share within 1% over 1000 windows") {
    for (uint64_t seed : {0ull, 7ull, 12345ull}) {
      CAPTURE(seed);
      const WindowSourceSequence sequence({0.7, 0.3}, seed);
      int64_t first = 0;
      for (int64_t g = 0; g < 1000; ++g) first += sequence.source_of(g) == 0;
      CHECK(std::abs(static_cast<double>(first) / 1000.0 - 0.7) <= 0.01);
      // Any later stretch of 1,000 too: the sequence has no bad start or drift.
      int64_t later = 0;
      for (int64_t g = 1000000; g < 1001000; ++g) later += sequence.source_of(g) == 0;
      CHECK(std::abs(static_cast<double>(later) / 1000.0 - 0.7) <= 0.01);
    }
    // Three sources, weights in any unit.
    const WindowSourceSequence three({5, 3, 2}, 1);
    std::vector<int64_t> counts(3, 0);
    for (int64_t g = 0; g < 1000; ++g) ++counts[static_cast<size_t>(three.source_of(g))];
    CHECK(std::abs(counts[0] - 500) <= 10);
    CHECK(std::abs(counts[1] - 300) <= 10);
    CHECK(std::abs(counts[2] - 200) <= 10);
  }

  TEST_CASE("mixture: the window-source sequence depends on the seed alone") {
    const WindowSourceSequence a({0.7, 0.3}, 3), again({0.7, 0.3}, 3), other({0.7, 0.3}, 4);
    int64_t differ = 0;
    for (int64_t g = 0; g < 200; ++g) {
      CHECK(a.source_of(g) == again.source_of(g));
      differ += a.source_of(g) != other.source_of(g);
    }
    CHECK(differ > 0);
  }

  TEST_CASE("mixture: one source reads exactly as its DataLoader") {
    auto source = ramp_source("one", 3001, 0);
    for (int64_t dp : {1, 2}) {
      for (int64_t r = 0; r < dp; ++r) {
        DataLoader loader(source, 16, 9, r, dp);
        MixtureLoader mixture({{"", source, 1, "data.path"}}, 16, 9, r, dp, "seq_len");
        for (int step = 0; step < 30; ++step) {  // past an epoch of 187 windows
          Tensor want = loader.next_batch(4), got = mixture.next_batch(4);
          REQUIRE(want.numel() == got.numel());
          for (int64_t i = 0; i < want.numel(); ++i) {
            REQUIRE(want.data<int32_t>()[i] == got.data<int32_t>()[i]);
          }
        }
        CHECK(mixture.state().samples_consumed == loader.state().samples_consumed);
        CHECK(mixture.state().sources.empty());  // its checkpoint is what it always was
      }
    }
  }

  TEST_CASE("mixture: the ranks of any dp degree read the global windows of one rank") {
    MixtureLoader single(two_sources(0.7, 0.3), 16, 5, 0, 1, "seq_len");
    std::vector<MixtureLoader> ranks;
    for (int64_t r = 0; r < 4; ++r)
      ranks.emplace_back(two_sources(0.7, 0.3), 16, 5, r, 4, "seq_len");
    for (int step = 0; step < 20; ++step) {
      const std::vector<int32_t> global = firsts(single.next_batch(8));
      std::vector<int32_t> joined;
      for (MixtureLoader& rank : ranks) {
        for (int32_t first : firsts(rank.next_batch(2))) joined.push_back(first);
      }
      REQUIRE(joined == global);
    }
    for (int64_t k = 0; k < 2; ++k) CHECK(ranks[0].source_samples(k) == single.source_samples(k));
    CHECK(single.source_samples(0) + single.source_samples(1) == 160);
  }

  TEST_CASE("mixture: a restored state continues with the windows of an uninterrupted run") {
    MixtureLoader whole(two_sources(0.7, 0.3), 16, 11, 0, 1, "seq_len");
    MixtureLoader first(two_sources(0.7, 0.3), 16, 11, 0, 1, "seq_len");
    for (int step = 0; step < 13; ++step) {
      whole.next_batch(4);
      first.next_batch(4);
    }
    const LoaderState saved = first.state();
    REQUIRE(saved.sources.size() == 2);
    CHECK(saved.sources[0].name == "a");
    CHECK(saved.sources[0].samples_consumed + saved.sources[1].samples_consumed == 52);
    MixtureLoader resumed(two_sources(0.7, 0.3), 16, 11, 0, 1, "seq_len");
    resumed.restore(saved);
    // Without the per-source counts (a state of one data.path) the sequence is replayed.
    MixtureLoader replayed(two_sources(0.7, 0.3), 16, 11, 0, 1, "seq_len");
    replayed.restore(LoaderState{saved.samples_consumed});
    for (int step = 0; step < 40; ++step) {  // source b (50 windows) runs out on the way
      const std::vector<int32_t> want = firsts(whole.next_batch(4));
      CHECK(firsts(resumed.next_batch(4)) == want);
      CHECK(firsts(replayed.next_batch(4)) == want);
    }
  }

  TEST_CASE("mixture: a source that runs out starts its next epoch and says so once") {
    MixtureLoader mixture(two_sources(1, 1), 16, 2, 0, 1, "seq_len");
    std::vector<std::string> notes;
    for (int step = 0; step < 30; ++step) {  // 120 windows: b's 50 run out, a's 250 do not
      mixture.next_batch(4);
      for (const std::string& note : mixture.take_notes()) notes.push_back(note);
    }
    REQUIRE(notes.size() == 1);
    CHECK(notes[0] == "source 'b' ran out of its 50 windows; starting its epoch 2");
    CHECK(mixture.source_samples(1) > 50);
  }

  TEST_CASE("mixture: a restore names the sources the saved state and the mixture do not share") {
    MixtureLoader first(two_sources(0.7, 0.3), 16, 4, 0, 1, "seq_len");
    first.next_batch(8);
    std::vector<MixtureSource> changed = two_sources(0.7, 0.3);
    changed[1].name = "c";
    MixtureLoader resumed(std::move(changed), 16, 4, 0, 1, "seq_len");
    resumed.restore(first.state());
    CHECK(resumed.source_samples(0) == first.source_samples(0));
    CHECK(resumed.source_samples(1) == 0);
    const std::vector<std::string> notes = resumed.take_notes();
    REQUIRE(notes.size() == 2);
    CHECK(notes[0] == "source 'c' is not in the saved mixture; it starts at its first window");
    CHECK(notes[1].starts_with("the saved mixture's source 'b' ("));
    CHECK(resumed.take_notes().empty());
  }
}

}  // namespace titan::data
