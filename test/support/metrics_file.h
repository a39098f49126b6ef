// Reading the metrics.jsonl that titan_train writes, for end-to-end tests.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace titan::testing {

// One map per line: key -> number (every value titan_train writes is a number; null, which it
// writes for NaN and infinities, reads as NaN).
std::vector<std::map<std::string, double>> read_metrics_jsonl(const std::string& path);

// The "loss" of every line, in order.
std::vector<double> losses_of(const std::vector<std::map<std::string, double>>& lines);

}  // namespace titan::testing
