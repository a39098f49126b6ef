// Fuzz target: a pre-tokenized token file (data/token_file.h: open_token_file), then every
// window of it as the loader reads them (data/loader.h: read_window, which checks each id
// against the header's vocabulary).
//
// Contract: open_token_file returns or throws InputError. An accepted file keeps its header's
// promises: a positive vocabulary, and token_count tokens that lie inside the file; every window
// reads, or is refused with InputError (an id outside the vocabulary), never outside the map.
#include <algorithm>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/token_file.h"
#include "fuzz/fuzz_support.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch_file("tokens.bin", data, size);
  std::unique_ptr<data::TokenSource> source;
  if (!fuzz::fuzz_reads("open_token_file", [&] { source = data::open_token_file(path); })) {
    return 0;
  }
  FUZZ_REQUIRE(source->vocab_bound() > 0, "open_token_file",
               "vocabulary " + std::to_string(source->vocab_bound()));
  FUZZ_REQUIRE(source->size() >= 0 && static_cast<uint64_t>(source->size()) <= size / 2,
               "open_token_file", "more tokens than the file holds");
  source->describe();

  constexpr int64_t kSeqLen = 7;
  std::vector<int32_t> row(kSeqLen + 1);
  for (int64_t window = 0; (window + 1) * kSeqLen + 1 <= source->size(); ++window) {
    fuzz::fuzz_reads("read_window", [&] {
      data::read_window(*source, window, kSeqLen, row.data(), "data.path");
      for (int32_t id : row) {
        FUZZ_REQUIRE(id >= 0 && id < source->vocab_bound(), "read_window", "an id outside");
      }
    });
  }
  return 0;
}
