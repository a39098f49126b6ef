#include "tools/tokenize/options.h"

#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <thread>

#include "core/check.h"

namespace titan::tokenize {

int available_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) return std::max(1, CPU_COUNT(&allowed));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

// CLI11 2.1 names one positional; the usage line says what the paths are.
class UsageFormatter final : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] INPUT... OUTPUT_DIR\n";
  }
};

}  // namespace

TokenizeCommandLine parse_tokenize_command_line(int argc, const char* const* argv) {
  TokenizeCommandLine result;
  TokenizeOptions& o = result.options;
  o.threads = available_cores();

  CLI::App app{
      "titan_tokenize: tokenizes corpora into sharded token files for titan_train, on every "
      "core.\n"
      "Each line of an input is one document: of a text file the line itself, of a JSON lines\n"
      "file (.jsonl, .json, .ndjson) the --field string of the object on it. Inputs may be\n"
      "compressed (.gz, .zst). Each row of a Parquet file (.parquet) is one: its --field\n"
      "column. Empty documents and nulls are skipped; bad lines are counted and reported.",
      "titan_tokenize"};
  std::vector<std::string> paths;
  app.formatter(std::make_shared<UsageFormatter>());
  app.add_option("PATHS", paths,
                 "INPUT...: files, folders (their .txt/.jsonl/.json/.ndjson files, optionally "
                 ".gz/.zst, and .parquet files, recursively, sorted by path) or quoted glob patterns; then "
                 "OUTPUT_DIR, the folder for the shards (created if missing)")
      ->type_name("");
  app.add_option("--tokenizer", o.tokenizer,
                 "byte, a Hugging Face tokenizer.json, or a folder holding one")
      ->capture_default_str();
  app.add_option("--field", o.field, "The text field of JSON lines objects, the text column of Parquet files")->capture_default_str();
  CLI::Option* shard_tokens =
      app.add_option("--shard-tokens", o.shard_tokens,
                     "Tokens per shard; the stream is cut there, mid-document if need be")
          ->capture_default_str();
  std::string text_documents;
  app.add_option("--text-documents", text_documents,
                 "line: each line of a text file is a document; file: each text file is one, "
                 "every byte (as titan_train reads data.format: text) [default: line; file "
                 "when OUTPUT is one .bin file]")
      ->check(CLI::IsMember({"line", "file"}));
  app.add_option(
      "--threads", o.threads,
      "Tokenizing threads [default: every core, " + std::to_string(o.threads) + " here]");
  app.add_option("--output-prefix", o.output_prefix,
                 "Shards are OUTPUT_DIR/PREFIX_00000.bin, PREFIX_00001.bin, …")
      ->capture_default_str();
  app.add_flag("--strict", o.strict,
               "A bad line (invalid JSON, not an object, no --field string) is an error, "
               "not counted and skipped");
  app.add_flag("--chat", o.chat,
               "The inputs are JSON lines of conversations ({\"messages\": [{role, content}, "
               "...]}): rendered in Llama 3's chat format, the loss on the answers only, packed "
               "whole into blocks of --seq-len tokens in one OUTPUT .bin (docs/fine_tuning.md)");
  CLI::Option* seq_len = app.add_option(
      "--seq-len", o.seq_len, "With --chat: the block, training.seq_len of the runs that read it");
  std::string overflow = "refuse";
  app.add_option("--chat-overflow", overflow,
                 "With --chat: a conversation longer than --seq-len is refused, or truncated")
      ->check(CLI::IsMember({"refuse", "truncate"}))
      ->capture_default_str();
  app.add_option("--progress-seconds", o.progress_seconds,
                 "Seconds between progress lines when stderr is not a terminal")
      ->capture_default_str();
  // Read signed: CLI11 would wrap "-1" into a size_t of 2^64 - 1.
  int64_t batch_bytes = static_cast<int64_t>(o.batch_bytes);
  app.add_option("--batch-bytes", batch_bytes,
                 "Bytes of text handed to a thread at a time (tuning)")
      ->capture_default_str();
  app.footer(
      "An OUTPUT ending in .bin is one token file instead of a folder of shards, and its text\n"
      "files are whole documents unless --text-documents line: `titan_tokenize in.txt out.bin`\n"
      "writes the tokens titan_train reads from in.txt itself.\n"
      "Output: token files (docs/data.md) of uint16 tokens when the vocabulary fits 65536,\n"
      "uint32 otherwise; each document is BOS, its tokens, EOS as the tokenizer says. The same\n"
      "inputs give the same shards byte for byte, with any --threads. Shards appear only when\n"
      "the whole corpus is done; PREFIX_*.bin shards of an earlier, longer run are removed.\n"
      "Example: titan_tokenize --tokenizer llama3/tokenizer.json --shard-tokens 100000000 \\\n"
      "           'c4/en/c4-train.*.json.gz' data/c4\n"
      "Exit codes: 0 done, 1 internal error, 2 bad input (one line naming the file and the "
      "fix).\n");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.help = true;
    result.help_text = app.help();
    return result;
  } catch (const CLI::ParseError& e) {
    input_error("command line: ", e.what(), "; titan_tokenize --help lists every flag");
  }

  if (paths.size() < 2) {
    input_error("command line: ", paths.empty() ? "no input and no output folder" : "no input",
                " given; usage: titan_tokenize [options] INPUT... OUTPUT_DIR");
  }
  o.output_dir = paths.back();
  o.inputs.assign(paths.begin(), paths.end() - 1);
  std::error_code error;
  o.single_file =
      o.output_dir.ends_with(".bin") && !std::filesystem::is_directory(o.output_dir, error);
  if (o.single_file && shard_tokens->count() > 0) {
    input_error("--shard-tokens shards an OUTPUT_DIR, and '", o.output_dir,
                "' ends in .bin, the single-file form; name a folder for the shards");
  }
  const bool whole_files = text_documents.empty() ? o.single_file : text_documents == "file";
  o.text_documents = whole_files ? data::TextDocuments::FILE : data::TextDocuments::LINE;
  if (o.shard_tokens <= 0) {
    input_error("--shard-tokens ", o.shard_tokens,
                " is not a token count; give a positive number, e.g. 100000000");
  }
  if (o.threads <= 0) {
    input_error("--threads ", o.threads, " is not a thread count; give 1 or more (default ",
                available_cores(), ", every core)");
  }
  // Threads past the cores gain nothing, and tens of thousands would take the system's thread
  // limit from every other process before one failed to start.
  if (o.threads > kMaxThreads) {
    input_error("--threads ", o.threads, " is more than ", kMaxThreads,
                "; give at most the cores this process may use (", available_cores(), ")");
  }
  if (batch_bytes <= 0) {
    input_error("--batch-bytes ", batch_bytes, "; give a positive byte count, e.g. 1048576");
  }
  o.batch_bytes = static_cast<size_t>(batch_bytes);
  if (!(o.progress_seconds >= 0)) {
    input_error("--progress-seconds ", o.progress_seconds,
                " is not a number of seconds; give 0 or more, e.g. 5");
  }
  if (o.output_prefix.empty() || o.output_prefix.find('/') != std::string::npos) {
    input_error("--output-prefix '", o.output_prefix,
                "' is not a file name prefix; give a name without '/', e.g. train");
  }
  if (o.field.empty()) input_error("--field is empty; name the text field, e.g. --field text");
  o.truncate_long_chats = overflow == "truncate";
  if (o.chat) {
    if (!o.single_file) {
      input_error("--chat writes one token file, and '", o.output_dir,
                  "' does not end in .bin; name the output file, e.g. chats.bin");
    }
    if (seq_len->count() == 0 || o.seq_len <= 0) {
      input_error("--chat packs conversations into windows of --seq-len tokens",
                  seq_len->count() == 0 ? ", and none is given"
                                        : detail::concat(", and ", o.seq_len, " is none"),
                  "; give training.seq_len of the runs that will read it, e.g. --seq-len 2048");
    }
  } else if (seq_len->count() > 0) {
    input_error("--seq-len packs conversations, with --chat only; plain corpora are cut into ",
                "windows when titan_train reads them");
  }
  return result;
}

}  // namespace titan::tokenize
