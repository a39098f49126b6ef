// titan_tokenize: corpora (text, JSON lines, gzip or zstd; files, folders, glob patterns) into
// sharded token files for titan_train, on every core. `titan_tokenize --help` and docs/data.md
// describe it; this folder holds its pieces.
//
//   titan_tokenize [--tokenizer byte|tokenizer.json] [--shard-tokens N] INPUT... OUTPUT_DIR
#include <cstdio>
#include <exception>

#include "core/check.h"                      // defines: InputError
#include "core/exit_code.h"                  // defines: ExitCode
#include "tools/tokenize/options.h"          // defines: parse_tokenize_command_line
#include "tools/tokenize/tokenize_chat.h"    // defines: tokenize_chat
#include "tools/tokenize/tokenize_corpus.h"  // defines: tokenize_corpus

int main(int argc, char** argv) {
  try {
    titan::tokenize::TokenizeCommandLine command = titan::tokenize::parse_tokenize_command_line(argc, argv);
    if (command.help) {
      std::fputs(command.help_text.c_str(), stdout);
      return titan::exit_status(titan::ExitCode::Ok);
    }
    const titan::tokenize::TokenizeOptions& o = command.options;
    if (o.chat) {
      titan::tokenize::ChatOptions chat;
      chat.inputs = o.inputs;
      chat.output = o.output_dir;
      chat.tokenizer = o.tokenizer;
      chat.seq_len = o.seq_len;
      chat.overflow = o.truncate_long_chats ? titan::tokenize::ChatOverflow::Truncate
                                            : titan::tokenize::ChatOverflow::Refuse;
      const titan::tokenize::ChatSummary summary = titan::tokenize::tokenize_chat(chat);
      std::printf("titan_tokenize: %s -> %s\n",
                  titan::tokenize::describe_chat_summary(summary, o.seq_len).c_str(),
                  o.output_dir.c_str());
    } else {
      titan::tokenize::tokenize_corpus(o);
    }
  } catch (const titan::InputError& e) {
    std::fprintf(stderr, "titan_tokenize: error: %s\n", e.what());
    return titan::exit_status(titan::ExitCode::BadInput);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_tokenize: internal error: %s\n", e.what());
    return titan::exit_status(titan::ExitCode::Failure);
  }
  return titan::exit_status(titan::ExitCode::Ok);
}
