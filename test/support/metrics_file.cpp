#include "support/metrics_file.h"

#include <cmath>
#include <fstream>
#include <regex>

namespace titan::testing {

std::vector<std::map<std::string, double>> read_metrics_jsonl(const std::string& path) {
  // Keys are words, or a word, '/' and a source's name (source_tokens/web, val_loss/code).
  // JSON has no NaN: titan_train writes a non-finite value as null, read back here as NaN.
  static const std::regex pair(R"re("([a-z_][a-z0-9_./-]*)": (null|[-+0-9.eEinfa]+))re");
  std::vector<std::map<std::string, double>> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::map<std::string, double> values;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), pair);
         it != std::sregex_iterator(); ++it) {
      values[(*it)[1]] = (*it)[2] == "null" ? std::nan("") : std::stod((*it)[2]);
    }
    lines.push_back(values);
  }
  return lines;
}

std::vector<double> losses_of(const std::vector<std::map<std::string, double>>& lines) {
  std::vector<double> losses;
  for (const auto& line : lines) losses.push_back(line.at("loss"));
  return losses;
}

}  // namespace titan::testing
