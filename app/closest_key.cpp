#include "app/closest_key.h"

#include <algorithm>

namespace titan::app {

std::string closest_key(const std::string& unknown, const std::vector<std::string>& known) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(3, unknown.size() / 3) + 1;
  for (const std::string& candidate : known) {
    size_t d = distance(unknown, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace titan::app
