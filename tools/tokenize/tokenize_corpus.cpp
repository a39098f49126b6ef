#include "tools/tokenize/tokenize_corpus.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/corpus_files.h"               // defines: expand_corpus_inputs
#include "data/corpus_reader.h"              // defines: CorpusReader
#include "data/tokenizer.h"                  // defines: load_tokenizer
#include "tools/tokenize/pipeline.h"         // defines: run_pipeline, TokenizedBatch, BadLine
#include "tools/tokenize/progress_report.h"  // defines: ProgressReport
#include "tools/tokenize/shard_writer.h"     // defines: ShardWriter

namespace titan::tokenize {

namespace {

std::string locate(const std::vector<data::CorpusFile>& files, const BadLine& bad) {
  return fmt::format("{}:{}: {}", files[bad.file_index].path, bad.line, bad.problem);
}

std::string bad_line_list(const std::vector<data::CorpusFile>& files,
                          const std::vector<BadLine>& kept, int64_t count) {
  std::string text = count > static_cast<int64_t>(kept.size())
                         ? fmt::format("first {} of {}: ", kept.size(), count)
                         : "";
  for (size_t i = 0; i < kept.size(); ++i) text += (i ? "; " : "") + locate(files, kept[i]);
  return text;
}

}  // namespace

TokenizeSummary tokenize_corpus(const TokenizeOptions& options) {
  std::vector<data::CorpusFile> files = data::expand_corpus_inputs(options.inputs);
  std::unique_ptr<data::Tokenizer> tokenizer =
      data::load_tokenizer(options.tokenizer, "--tokenizer");
  ShardWriter writer = options.single_file
                           ? ShardWriter(options.output_dir, tokenizer->vocab_size())
                           : ShardWriter(options.output_dir, options.output_prefix,
                                         options.shard_tokens, tokenizer->vocab_size());

  // Every Parquet file's footer and column checked here, before the first document.
  data::CorpusReader reader(files, options.batch_bytes, options.text_documents,
                            data::ParquetColumnChoice{options.field, "--field"});

  uint64_t total_bytes = 0;
  for (const data::CorpusFile& file : files) total_bytes += file.bytes;
  const std::string output =
      options.single_file
          ? writer.pattern() + " (one file)"
          : fmt::format("{}, at most {} tokens each", writer.pattern(), options.shard_tokens);
  fmt::print(
      "titan_tokenize: {} file{} ({:.1f} MB, {} a document) -> {}; {}, vocab {} (uint{} "
      "tokens); {} thread{}\n",
      files.size(), files.size() == 1 ? "" : "s", static_cast<double>(total_bytes) / 1e6,
      options.text_documents == data::TextDocuments::FILE ? "a text file" : "a line", output,
      tokenizer->describe(), tokenizer->vocab_size(), 8 * writer.token_bytes(), options.threads,
      options.threads == 1 ? "" : "s");
  std::fflush(stdout);

  TokenizeSummary summary;
  summary.files = static_cast<int64_t>(files.size());
  std::vector<BadLine> bad_lines;  // the first kBadLinesKept of the corpus
  ProgressReport progress(total_bytes, ::isatty(STDERR_FILENO) == 1, options.progress_seconds);
  auto counts = [&] {
    return TokenizeCounts{summary.bytes_read, summary.documents, writer.tokens()};
  };

  PipelineHooks hooks;
  hooks.consume = [&](TokenizedBatch& batch) {
    if (options.strict && !batch.first_bad_lines.empty()) {
      input_error(locate(files, batch.first_bad_lines.front()),
                  "; fix or remove the line, or leave out --strict to skip and count bad lines");
    }
    writer.append(batch.tokens);
    summary.documents += batch.documents;
    summary.empty_documents += batch.empty_documents;
    summary.null_documents += batch.null_documents;
    summary.bad_lines += batch.bad_lines;
    summary.text_bytes += batch.text_bytes;
    summary.bytes_read = batch.bytes_read;
    for (BadLine& bad : batch.first_bad_lines) {
      if (bad_lines.size() < kBadLinesKept) bad_lines.push_back(std::move(bad));
    }
    progress.update(counts());
  };
  hooks.idle = [&] { progress.update(counts()); };
  try {
    run_pipeline(reader, *tokenizer, options.field, options.threads, hooks);
  } catch (...) {
    progress.finish();
    throw;
  }
  summary.bytes_read = total_bytes;
  progress.finish();

  if (writer.tokens() == 0) {
    input_error("the inputs hold no document to tokenize (", summary.empty_documents, " empty, ",
                summary.null_documents > 0 ? std::to_string(summary.null_documents) + " nulls, " : "",
                summary.bad_lines, " bad lines",
                bad_lines.empty() ? "" : ": " + bad_line_list(files, bad_lines, summary.bad_lines),
                "); check the inputs", summary.bad_lines > 0 ? " and --field" : "");
  }
  const int64_t stale = writer.commit();
  summary.tokens = writer.tokens();
  summary.shards = writer.shards();
  summary.seconds = progress.elapsed_s();

  if (summary.bad_lines > 0) {
    fmt::print(stderr,
               "titan_tokenize: warning: {} bad line{} skipped ({}); --strict makes a bad line "
               "an error\n",
               summary.bad_lines, summary.bad_lines == 1 ? "" : "s",
               bad_line_list(files, bad_lines, summary.bad_lines));
  }
  std::string skipped;
  if (summary.empty_documents > 0 || summary.bad_lines > 0 || summary.null_documents > 0) {
    const std::string nulls =
        summary.null_documents > 0
            ? fmt::format(", {} null{}", summary.null_documents,
                          summary.null_documents == 1 ? "" : "s")
            : "";
    skipped = fmt::format("; skipped {} empty document{}{} and {} bad line{}",
                          summary.empty_documents, summary.empty_documents == 1 ? "" : "s", nulls,
                          summary.bad_lines, summary.bad_lines == 1 ? "" : "s");
  }
  fmt::print(
      "titan_tokenize: done: {} file{}, {} document{}, {} tokens, {} shard{} ({}); "
      "{:.1f} MB in {:.3f} s ({:.2f} MB/s; {:.1f} MB of text){}{}\n",
      summary.files, summary.files == 1 ? "" : "s", summary.documents,
      summary.documents == 1 ? "" : "s", summary.tokens, summary.shards,
      summary.shards == 1 ? "" : "s", writer.pattern(),
      static_cast<double>(summary.bytes_read) / 1e6, summary.seconds,
      static_cast<double>(summary.bytes_read) / 1e6 / std::max(summary.seconds, 1e-9),
      static_cast<double>(summary.text_bytes) / 1e6, skipped,
      stale > 0 ? fmt::format("; removed {} shard{} of an earlier run past the last", stale,
                              stale == 1 ? "" : "s")
                : "");
  return summary;
}

}  // namespace titan::tokenize
