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
#include "tools/tokenize/tokenize_corpus.h"  // defines: tokenize_corpus

int main(int argc, char** argv) {
  try {
    titan::tokenize::TokenizeCommandLine command = titan::tokenize::parse_tokenize_command_line(argc, argv);
    if (command.help) {
      std::fputs(command.help_text.c_str(), stdout);
      return titan::exit_status(titan::ExitCode::Ok);
    }
    titan::tokenize::tokenize_corpus(command.options);
  } catch (const titan::InputError& e) {
    std::fprintf(stderr, "titan_tokenize: error: %s\n", e.what());
    return titan::exit_status(titan::ExitCode::BadInput);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_tokenize: internal error: %s\n", e.what());
    return titan::exit_status(titan::ExitCode::Failure);
  }
  return titan::exit_status(titan::ExitCode::Ok);
}
