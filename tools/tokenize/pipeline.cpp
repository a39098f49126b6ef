#include "tools/tokenize/pipeline.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/check.h"
#include "tools/tokenize/options.h"  // defines: available_cores

namespace titan::tokenize {

namespace {

// What the threads share; every field under `mutex`.
struct Shared {
  std::mutex mutex;
  std::condition_variable batch_ready;   // to workers: input has a batch, or the reader is done
  std::condition_variable room;          // to the reader: in_flight dropped
  std::condition_variable result_ready;  // to the consumer: results has a batch, or done
  std::deque<data::LineBatch> input;
  struct Result {
    TokenizedBatch batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Result> results;  // by sequence
  int64_t in_flight = 0;              // batches read and not yet consumed
  int64_t limit = 0;
  bool reader_done = false;
  int64_t batches_read = 0;         // valid once reader_done
  std::exception_ptr reader_error;  // comes after batch batches_read - 1
  bool stop = false;                // the consumer gave up: everyone leaves
};

void read_batches(data::CorpusReader& reader, Shared& shared) {
  int64_t read = 0;
  std::exception_ptr error;
  try {
    for (;;) {
      {
        std::unique_lock lock(shared.mutex);
        shared.room.wait(lock, [&] { return shared.stop || shared.in_flight < shared.limit; });
        if (shared.stop) break;
      }
      data::LineBatch batch;
      if (!reader.next(batch)) break;
      {
        std::lock_guard lock(shared.mutex);
        shared.input.push_back(std::move(batch));
        ++shared.in_flight;
        ++read;
      }
      shared.batch_ready.notify_one();
    }
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard lock(shared.mutex);
    shared.reader_done = true;
    shared.batches_read = read;
    shared.reader_error = error;
  }
  shared.batch_ready.notify_all();
  shared.result_ready.notify_all();
}

void work(const data::CorpusReader& reader, const data::Tokenizer& tokenizer,
          const std::string& field, Shared& shared) {
  data::DocumentParser parser(field);
  for (;;) {
    data::LineBatch batch;
    {
      std::unique_lock lock(shared.mutex);
      shared.batch_ready.wait(
          lock, [&] { return shared.stop || !shared.input.empty() || shared.reader_done; });
      if (shared.stop || shared.input.empty()) return;
      batch = std::move(shared.input.front());
      shared.input.pop_front();
    }
    Shared::Result result;
    try {
      reader.decode(batch);  // a Parquet row group's pages, here on every core
      result.batch =
          tokenize_batch(batch, reader.files()[batch.file_index].format, tokenizer, parser);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard lock(shared.mutex);
      shared.results.emplace(batch.sequence, std::move(result));
    }
    shared.result_ready.notify_one();
  }
}

}  // namespace

TokenizedBatch tokenize_batch(const data::LineBatch& batch, data::CorpusFormat format,
                              const data::Tokenizer& tokenizer, data::DocumentParser& parser) {
  TokenizedBatch out;
  out.sequence = batch.sequence;
  out.file_index = batch.file_index;
  out.bytes_read = batch.bytes_read;
  out.null_documents = batch.nulls;
  out.tokens.reserve(batch.text.size() / 3 + 2 * batch.lines());
  std::string problem;
  for (size_t i = 0; i < batch.lines(); ++i) {
    std::string_view text;
    if (!parser.parse(batch.line(i), format, text, problem)) {
      if (out.first_bad_lines.size() < kBadLinesKept) {
        out.first_bad_lines.push_back(
            {batch.file_index, batch.first_line + static_cast<int64_t>(i), problem});
      }
      ++out.bad_lines;
      continue;
    }
    if (text.empty()) {
      ++out.empty_documents;
      continue;
    }
    std::vector<int32_t> ids = tokenizer.encode_document(text);
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    ++out.documents;
    out.text_bytes += text.size();
  }
  return out;
}

void run_pipeline(data::CorpusReader& reader, const data::Tokenizer& tokenizer,
                  const std::string& field, int threads, const PipelineHooks& hooks) {
  TT_CHECK(threads >= 1, "threads ", threads);
  Shared shared;
  shared.limit = 2 * threads + 2;
  std::vector<std::thread> pool;
  // Stops and joins the threads however this function is left.
  struct Joiner {
    Shared& shared;
    std::vector<std::thread>& pool;
    ~Joiner() {
      {
        std::lock_guard lock(shared.mutex);
        shared.stop = true;
      }
      shared.room.notify_all();
      shared.batch_ready.notify_all();
      for (std::thread& thread : pool) thread.join();
    }
  } joiner{shared, pool};
  pool.emplace_back(read_batches, std::ref(reader), std::ref(shared));
  try {
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back(work, std::cref(reader), std::cref(tokenizer), std::cref(field),
                        std::ref(shared));
    }
  } catch (const std::system_error& e) {
    // A --threads far beyond the machine: the system refuses a thread (EAGAIN) long before.
    input_error("--threads ", threads, ": the system refused to start tokenizing thread ",
                pool.size(), " (", e.what(), "); give fewer, e.g. ", available_cores(),
                ", the cores this process may use");
  }

  for (int64_t next = 0;; ++next) {
    Shared::Result result;
    for (;;) {
      std::unique_lock lock(shared.mutex);
      const bool ready = shared.result_ready.wait_for(lock, std::chrono::milliseconds(200), [&] {
        return shared.results.contains(next) || (shared.reader_done && next == shared.batches_read);
      });
      if (ready) {
        auto found = shared.results.find(next);
        if (found == shared.results.end()) {
          // Every batch consumed: the reader ended, or failed after its last batch.
          if (shared.reader_error) std::rethrow_exception(shared.reader_error);
          return;
        }
        result = std::move(found->second);
        shared.results.erase(found);
        --shared.in_flight;
        break;
      }
      lock.unlock();
      if (hooks.idle) hooks.idle();
    }
    shared.room.notify_one();
    if (result.error) std::rethrow_exception(result.error);
    hooks.consume(result.batch);
  }
}

}  // namespace titan::tokenize
