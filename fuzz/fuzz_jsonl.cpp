// Fuzz target: a JSON lines corpus file (data/corpus_reader.h: CorpusReader cutting it into
// lines, DocumentParser taking each line's "text" field), plain, gzip or zstd (data/
// byte_stream.h), as titan_tokenize reads its inputs.
//
// The first input byte picks the file's compression (its name: .jsonl, .jsonl.gz, .jsonl.zst)
// and the batch size; the rest is the file.
//
// Contract: reading returns batches or throws InputError (a corrupt or truncated compressed
// file). Batches number lines from 1 without gaps; a plain file's lines hold no more bytes than
// the file. Every line parses to a document (a view inside the line or the parser) or is
// refused with a reason, never anything else.
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus_reader.h"
#include "fuzz/fuzz_support.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kNames[] = {"corpus.jsonl", "corpus.jsonl.gz", "corpus.jsonl.zst"};
  const unsigned choice = data[0];
  const char* name = kNames[choice % 3];
  const size_t batch_bytes = size_t{1} << ((choice / 3) % 12);  // 1 B … 2 KiB
  const std::string path = fuzz::write_scratch_file(name, data + 1, size - 1);

  data::CorpusReader reader({data::classify_corpus_file(path, size - 1)}, batch_bytes);
  data::DocumentParser parser("text");
  data::LineBatch batch;
  int64_t next_line = 1;
  uint64_t line_bytes = 0;
  fuzz::fuzz_reads("CorpusReader::next", [&] {
    while (reader.next(batch)) {
      FUZZ_REQUIRE(batch.first_line == next_line && batch.lines() > 0, "CorpusReader",
                   "batch starts at line " + std::to_string(batch.first_line) + ", expected " +
                       std::to_string(next_line));
      FUZZ_REQUIRE(batch.ends.back() == batch.text.size(), "CorpusReader",
                   "the lines do not end where the batch's text does");
      next_line += static_cast<int64_t>(batch.lines());
      line_bytes += batch.text.size();
      for (size_t i = 0; i < batch.lines(); ++i) {
        const std::string_view line = batch.line(i);
        std::string_view text;
        std::string problem;
        bool ok = false;
        FUZZ_REQUIRE(fuzz::fuzz_reads("DocumentParser::parse",
                                      [&] {
                                        ok = parser.parse(line, data::CorpusFormat::JSON_LINES,
                                                          text, problem);
                                      }),
                     "DocumentParser::parse", "threw InputError instead of naming a problem");
        FUZZ_REQUIRE(ok || !problem.empty(), "DocumentParser::parse", "refused a line silently");
        if (ok) {
          volatile char sink = 0;
          for (char c : text) sink = sink ^ c;  // ASan: the view must be readable
        }
      }
    }
  });
  if (choice % 3 == 0) {
    FUZZ_REQUIRE(line_bytes <= size - 1, "CorpusReader", "more line bytes than the file holds");
  }
  return 0;
}
