// Where a window's documents begin (data/documents.h): each input's document start from the
// EOS that ends the document before it, in windows the loader cut anywhere in the stream (a
// first document begun before the window starts at its first token), in titan_tokenize's
// shards of JSON-lines documents read back through the loader, and in the hostile streams (no
// EOS at all, an EOS at every token); and the sampled cost of a stream's documents.
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/documents.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "support/process.h"
#include "support/token_sources.h"

namespace titan::data {
namespace {

Tensor row_tensor(const std::vector<int32_t>& tokens) {
  return Tensor::from_vector<int32_t>(tokens, {1, static_cast<int64_t>(tokens.size())});
}

std::vector<int32_t> as_vector(const Tensor& t) {
  return {t.data<int32_t>(), t.data<int32_t>() + t.numel()};
}

constexpr int32_t E = ByteTokenizer::kEos, B = ByteTokenizer::kBos;

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("documents: each input's document begins after the last EOS before it") {
    // The window starts inside a document (its first starts at 0), an EOS ends it at 2, a
    // document of one token (an EOS alone) at 6, and the last one runs past the window.
    const Tensor inputs = row_tensor({'a', 'b', E, B, 'c', E, E, B, 'd'});
    CHECK(as_vector(document_starts(inputs, E)) == std::vector<int32_t>{0, 0, 0, 3, 3, 3, 6, 7, 7});
    CHECK(document_square_sum(as_vector(document_starts(inputs, E))) == 9 + 9 + 1 + 4);
    // Two sequences: each its own.
    const Tensor two = Tensor::from_vector<int32_t>({E, 'a', 'b', 'a', E, 'b'}, {2, 3});
    CHECK(as_vector(document_starts(two, E)) == std::vector<int32_t>{0, 1, 1, 0, 0, 2});
  }

  TEST_CASE("documents: no EOS at all is one document and an EOS at every token a document each") {
    const Tensor none = row_tensor({'x', 'y', 'z', 'w'});
    CHECK(as_vector(document_starts(none, E)) == std::vector<int32_t>{0, 0, 0, 0});
    CHECK(document_square_sum(as_vector(document_starts(none, E))) == 16);
    const Tensor every = row_tensor({E, E, E, E});
    CHECK(as_vector(document_starts(every, E)) == std::vector<int32_t>{0, 1, 2, 3});
    CHECK(document_square_sum(as_vector(document_starts(every, E))) == 4);
  }

  TEST_CASE("documents: titan_tokenize's documents read back through the loader end at its EOS") {
    // Three JSON-lines documents of 3, 1 and 5 bytes: BOS bytes EOS each, 5 + 3 + 7 tokens.
    const std::string dir = testing::scratch_dir("documents");
    {
      std::ofstream jsonl(dir + "/docs.jsonl");
      jsonl << R"({"text": "abc"})"
            << "\n"
            << R"({"text": "d"})"
            << "\n"
            << R"({"text": "efghi"})"
            << "\n";
    }
    const testing::ProcessResult r =
        testing::run_process(testing::binary_path("titan_tokenize") + " --threads 1 " + dir +
                             "/docs.jsonl " + dir + "/docs.bin");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const std::shared_ptr<const TokenSource> source =
        testing::open_source(dir + "/docs.bin", "bin");
    REQUIRE(source->size() == 15);
    // Windows of 7 (8 tokens): window 0's inputs are B a b c E B d, window 1's E B e f g h i.
    const FixedOrderLoader loader(source, 7, 0, 1, "data.path", "training.seq_len");
    const Tensor w0 = loader.batch(0, 1), w1 = loader.batch(1, 1);
    CHECK(as_vector(document_starts(w0.narrow(1, 0, 7).contiguous(), E)) ==
          std::vector<int32_t>{0, 0, 0, 0, 0, 5, 5});
    // Window 1 opens on the EOS of the "d" document, which began in window 0: for the window it
    // is a document of one token, from the window's first.
    CHECK(as_vector(document_starts(w1.narrow(1, 0, 7).contiguous(), E)) ==
          std::vector<int32_t>{0, 1, 1, 1, 1, 1, 1});
    // Sampled over both windows: (5² + 2²)/7 and (1² + 6²)/7 keys per token, 2 documents each.
    const DocumentContext c = sample_document_context(*source, 7, E);
    CHECK(c.windows == 2);
    CHECK(c.keys_per_token == doctest::Approx((29.0 + 37.0) / 2 / 7));
    CHECK(c.mean_documents == 2.0);
  }
}  // TEST_SUITE

}  // namespace titan::data
