// titan_tokenize's command line (CLI11), checked: what tokenize_corpus() needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus_reader.h"

namespace titan::tokenize {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // files, folders, glob patterns (data/corpus_files.h)
  std::string output_dir;           // or the single file's path
  // OUTPUT ends in .bin (and is no folder): the whole stream in that one token file, no shards.
  bool single_file = false;
  // How text files split into documents: by line, or (the single-file form's default) whole.
  data::TextDocuments text_documents = data::TextDocuments::LINE;
  std::string tokenizer = "byte";  // data::load_tokenizer's spec
  std::string field = "text";      // of JSON lines objects
  std::string output_prefix = "shard";
  int64_t shard_tokens = 100'000'000;
  int threads = 1;  // workers; the command line's default is every core this process may use
  bool strict = false;
  size_t batch_bytes = 256 << 10;  // small enough that a 5 MB file keeps 2 cores busy
  double progress_seconds = 5;     // between plain progress lines (stderr not a terminal)
  // --chat: the inputs are conversations, packed into one token file of blocks of seq_len
  // (tokenize_chat.h).
  bool chat = false;
  int64_t seq_len = 0;
  bool truncate_long_chats = false;  // --chat-overflow truncate
};

struct TokenizeCommandLine {
  bool help = false;
  std::string help_text;
  TokenizeOptions options;
};

// InputError for a bad flag or value, naming it and the fix.
TokenizeCommandLine parse_tokenize_command_line(int argc, const char* const* argv);

// The most --threads takes (far more than any machine's cores).
inline constexpr int kMaxThreads = 1024;

// The cores this process may run on (its affinity mask: taskset, cgroups, srun binding).
int available_cores();

}  // namespace titan::tokenize
