#include "tools/generate/prompts.h"

#include <filesystem>
#include <iostream>
#include <string_view>

#include "core/check.h"
#include "data/corpus_files.h"
#include "data/corpus_reader.h"

namespace titan::generate {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> prompts_of_file(const std::string& path, const std::string& field) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    input_error("--prompts: '", path, "' does not exist; name a file of prompts, one per line");
  }
  if (!fs::is_regular_file(path, ec)) {
    input_error("--prompts: '", path,
                "' is not a regular file; name a file of prompts, one per "
                "line");
  }
  data::CorpusFile file = data::classify_corpus_file(path, fs::file_size(path, ec));
  if (!field.empty()) file.format = data::CorpusFormat::JSON_LINES;
  const std::string json_field = field.empty() ? "text" : field;
  data::CorpusReader reader({file}, 1 << 20);
  data::DocumentParser parser(json_field);
  std::vector<std::string> prompts;
  data::LineBatch batch;
  while (reader.next(batch)) {
    for (size_t i = 0; i < batch.lines(); ++i) {
      std::string_view text;
      std::string problem;
      if (!parser.parse(batch.line(i), file.format, text, problem)) {
        input_error("--prompts: '", path, "' line ", batch.first_line + static_cast<int64_t>(i),
                    ": ", problem, "; each line must be a JSON object whose \"", json_field,
                    "\" is the prompt (--field names another)");
      }
      if (!text.empty()) prompts.emplace_back(text);
    }
  }
  if (prompts.empty()) {
    input_error("--prompts: '", path,
                "' holds no prompt (no line that is not empty); write one "
                "prompt per line");
  }
  return prompts;
}

std::vector<std::string> prompts_of_stdin() {
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) {
    input_error(
        "no prompt: standard input held none; give --prompt TEXT, --prompts FILE, or "
        "prompts on standard input, one per line (or --eval FILE for a loss)");
  }
  return prompts;
}

}  // namespace

std::vector<std::string> read_prompts(const Options& options) {
  if (!options.prompts.empty()) return options.prompts;
  if (!options.prompts_file.empty()) return prompts_of_file(options.prompts_file, options.field);
  return prompts_of_stdin();
}

}  // namespace titan::generate
