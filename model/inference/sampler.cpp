#include "model/inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace titan::model {

namespace {

// vLLM treats temperatures below this as greedy (_SAMPLING_EPS).
constexpr double kGreedyBelow = 1e-5;

int32_t argmax(std::span<const float> logits) {
  // std::max_element keeps the first of equal maxima: the lower id.
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sequence,
                     uint64_t step) {
  TT_CHECK(!logits.empty(), "sample_token: no logits");
  TT_CHECK(params.temperature >= 0 && params.top_k >= 0 && params.top_p > 0 && params.top_p <= 1,
           "sample_token: temperature ", params.temperature, ", top_k ", params.top_k, ", top_p ",
           params.top_p);
  if (params.temperature < kGreedyBelow) return argmax(logits);

  // The candidates, largest logit first (ties: lower id first); only as many sorted as the
  // limits need.
  const int64_t V = static_cast<int64_t>(logits.size());
  const int64_t k = params.top_k > 0 ? std::min(params.top_k, V) : V;
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k < V || params.top_p < 1) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
    ids.resize(static_cast<size_t>(k));
  }

  // Softmax of logit / temperature over the candidates, in double.
  const double max_logit =
      logits[static_cast<size_t>(*std::min_element(ids.begin(), ids.end(), before))];
  std::vector<double> weights(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    weights[i] = std::exp((logits[static_cast<size_t>(ids[i])] - max_logit) / params.temperature);
    total += weights[i];
  }
  if (params.top_p < 1) {
    // The fewest leading candidates whose probability reaches top_p (at least one).
    double kept = 0;
    size_t n = 0;
    while (n < ids.size() && (n == 0 || kept < params.top_p * total)) kept += weights[n++];
    ids.resize(n);
    weights.resize(n);
    total = kept;
  }

  const CounterRng rng(params.seed, "titan_generate.sample");
  const double target = rng.uniform((sequence << 32) | (step & 0xffffffffu)) * total;
  double running = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    running += weights[i];
    if (running >= target) return ids[i];
  }
  return ids.back();  // rounding left the target a hair above the sum
}

}  // namespace titan::model
