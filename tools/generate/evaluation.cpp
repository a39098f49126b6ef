#include "tools/generate/evaluation.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/check.h"
#include "data/corpus_files.h"
#include "data/corpus_reader.h"
#include "data/documents.h"
#include "data/token_file.h"

namespace titan::generate {

namespace {

// The documents of a JSON lines file, tokenized and concatenated, held in memory.
class JsonLinesTokens final : public data::TokenSource {
 public:
  JsonLinesTokens(const std::string& path, const data::Tokenizer& tokenizer)
      : path_(path), vocab_(tokenizer.vocab_size()), tokenizer_(tokenizer.describe()) {
    std::error_code ec;
    data::CorpusFile file = data::classify_corpus_file(path, std::filesystem::file_size(path, ec));
    data::CorpusReader reader({file}, 1 << 20);
    data::DocumentParser parser("text");
    data::LineBatch batch;
    while (reader.next(batch)) {
      for (size_t i = 0; i < batch.lines(); ++i) {
        std::string_view text;
        std::string problem;
        if (!parser.parse(batch.line(i), file.format, text, problem)) {
          input_error("--eval: '", path, "' line ", batch.first_line + static_cast<int64_t>(i),
                      ": ", problem, "; each line must be a JSON object with a \"text\" string");
        }
        if (text.empty()) continue;  // as titan_tokenize: no document
        const std::vector<int32_t> ids = tokenizer.encode_document(text);
        tokens_.insert(tokens_.end(), ids.begin(), ids.end());
      }
    }
  }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void read(int64_t start, int64_t count, int32_t* dst) const override {
    std::copy_n(tokens_.begin() + start, count, dst);
  }
  int64_t vocab_bound() const override { return vocab_; }
  std::string describe() const override {
    return detail::concat(path_, " (JSON lines, ", tokenizer_, ", ", tokens_.size(), " tokens)");
  }

 private:
  std::string path_;
  int64_t vocab_;
  std::string tokenizer_;
  std::vector<int32_t> tokens_;
};

std::shared_ptr<const data::TokenSource> open_eval_source(const std::string& path,
                                                          const data::Tokenizer& tokenizer) {
  std::error_code ec;
  const bool file = std::filesystem::is_regular_file(path, ec);
  if (file && data::classify_corpus_file(path, 0).format == data::CorpusFormat::JSON_LINES &&
      data::resolve_token_format(path, data::TokenFormat::Auto) == data::TokenFormat::Text) {
    return std::make_shared<JsonLinesTokens>(path, tokenizer);
  }
  return data::open_token_source({path, data::TokenFormat::Auto, "--eval", ""}, &tokenizer);
}

}  // namespace

Evaluation::Evaluation(const std::string& path, const data::Tokenizer& tokenizer,
                       int64_t vocab_size, int64_t steps, int64_t batch_size, int64_t seq_len,
                       std::optional<int32_t> document_eos)
    : source_(open_eval_source(path, tokenizer)),
      batch_size_(batch_size),
      seq_len_(seq_len),
      document_eos_(document_eos) {
  if (source_->vocab_bound() > vocab_size) {
    input_error("--eval: ", source_->describe(), " uses ids below ", source_->vocab_bound(),
                " but the model's vocabulary has ", vocab_size,
                " tokens; evaluate data tokenized for this model (or pick its --tokenizer)");
  }
  loader_ =
      std::make_unique<data::FixedOrderLoader>(source_, seq_len, 0, 1, "--eval", "--eval-seq-len");
  if (steps != -1) {
    int64_t sequences = 0, tokens = 0;
    if (__builtin_mul_overflow(steps, batch_size, &sequences) ||
        __builtin_mul_overflow(sequences, seq_len, &tokens)) {
      input_error("--eval-steps ", steps, " batches of ", batch_size, " × ", seq_len,
                  " tokens overflow 64 bits; use -1 (every whole batch of the file) or fewer");
    }
    batches_ = steps;
    return;
  }
  batches_ = loader_->windows() / batch_size;
  if (batches_ == 0) {
    input_error("--eval: ", source_->describe(), " holds ", loader_->windows(), " windows of ",
                seq_len + 1, " tokens, fewer than one batch of ", batch_size,
                " sequences; use more data, or a smaller --eval-batch-size or --eval-seq-len");
  }
}

EvalResult Evaluation::run(model::Transformer& model) const {
  const auto start = std::chrono::steady_clock::now();
  double loss_sum = 0;
  int64_t trained = 0;  // the targets the loss covers: all of them but packed prompts
  for (int64_t k = 0; k < batches_; ++k) {
    // [B, S + 1] as stored; packed conversations (titan_tokenize --chat) carry a loss mask.
    const data::WindowTokens w = data::split_window(loader_->batch(k, batch_size_), seq_len_);
    trained += w.trained;
    loss_sum += model.evaluate(
        w.inputs, w.targets,
        document_eos_ ? data::document_starts(w.inputs, *document_eos_) : Tensor());
  }
  EvalResult result;
  result.batches = batches_;
  result.batch_size = batch_size_;
  result.seq_len = seq_len_;
  result.loss = loss_sum / static_cast<double>(std::max<int64_t>(trained, 1));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace titan::generate
