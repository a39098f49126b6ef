// titan_generate --eval: the mean token loss and perplexity of a model over a file, computed by
// the forward titan_train's validation runs (model::Transformer::evaluate) over the batches its
// validation reads (data::FixedOrderLoader: windows of S + 1 tokens from the stream's start,
// batch k = windows k·B … k·B + B − 1). With --eval-batch-size = validation.local_batch_size × dp
// and --eval-seq-len = validation.seq_len, on the checkpoint of a step that validated, the loss
// is that step's val_loss.
//
// The file is read as titan_train reads validation.dataset_path (a text file is one document
// through the tokenizer; a .bin token file, a folder or a glob of shards as they are), and a
// JSON lines file (.jsonl, .json, .ndjson) as titan_tokenize would tokenize it: each line's
// "text" field one document, BOS … EOS, concatenated. With the EOS of a block_causal run the
// model attends within each document (data/documents.h), as that run's validation does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/loader.h"
#include "data/token_source.h"
#include "data/tokenizer.h"
#include "model/transformer.h"

namespace titan::generate {

struct EvalResult {
  double loss = 0;  // mean over every target token
  int64_t batches = 0, batch_size = 0, seq_len = 0;
  double seconds = 0;
};

class Evaluation {
 public:
  // Opens and checks the file (its tokens must fit `vocab_size`, one batch must fit in it) and
  // the batch count; InputError naming --eval, --eval-steps or --eval-seq-len otherwise.
  // document_eos: block_causal, documents ending at this token; nullopt: causal.
  Evaluation(const std::string& path, const data::Tokenizer& tokenizer, int64_t vocab_size,
             int64_t steps, int64_t batch_size, int64_t seq_len,
             std::optional<int32_t> document_eos = std::nullopt);

  EvalResult run(model::Transformer& model) const;
  std::string describe() const { return source_->describe(); }
  int64_t batches() const { return batches_; }
  // Batches past the file's end start again from its first window (as titan_train's validation).
  bool wraps() const { return batches_ * batch_size_ > loader_->windows(); }

 private:
  std::shared_ptr<const data::TokenSource> source_;
  std::unique_ptr<data::FixedOrderLoader> loader_;
  int64_t batches_ = 0, batch_size_ = 0, seq_len_ = 0;
  std::optional<int32_t> document_eos_;
};

}  // namespace titan::generate
