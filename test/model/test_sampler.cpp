// The sampler (model/inference/sampler.h): greedy is the largest logit; top-k 1 is greedy at any
// temperature; a seed gives the same draws twice and another seed other draws; draws follow
// softmax(logits / temperature); top-k and top-p keep exactly the tokens they promise.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/rng.h"
#include "model/inference/sampler.h"

using namespace titan;
using namespace titan::model;

namespace {

std::vector<float> random_logits(int64_t n, uint64_t seed) {
  const CounterRng rng(seed, "test_sampler");
  std::vector<float> logits(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    logits[static_cast<size_t>(i)] = static_cast<float>(3 * rng.normal(i));
  return logits;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "generate: greedy is the largest logit (ties to the lower id) and top-k 1 is greedy at any "
      "temperature") {
    const std::vector<float> tie{0.5f, 2.0f, -1.0f, 2.0f};
    CHECK(sample_token(tie, {}, 0, 0) == 1);
    for (uint64_t seed = 0; seed < 50; ++seed) {
      const std::vector<float> logits = random_logits(300, seed);
      const int32_t greedy = sample_token(logits, {}, 0, 0);
      CHECK(greedy == std::max_element(logits.begin(), logits.end()) - logits.begin());
      for (double temperature : {0.3, 1.0, 5.0}) {
        for (double top_p : {1.0, 0.5}) {
          CHECK(sample_token(logits, {temperature, 1, top_p, seed}, seed, 3) == greedy);
        }
      }
      CHECK(sample_token(tie, {2.0, 1, 1.0, seed}, 0, seed) == 1);
    }
  }

  TEST_CASE("generate: a seed gives the same draws twice and another seed others") {
    const std::vector<float> logits = random_logits(50, 7);
    std::vector<int32_t> first, second, other_seed;
    for (uint64_t step = 0; step < 200; ++step) {
      first.push_back(sample_token(logits, {1.0, 0, 1.0, 42}, 3, step));
      second.push_back(sample_token(logits, {1.0, 0, 1.0, 42}, 3, step));
      other_seed.push_back(sample_token(logits, {1.0, 0, 1.0, 43}, 3, step));
    }
    CHECK(first == second);
    CHECK(first != other_seed);
    CHECK(std::set<int32_t>(first.begin(), first.end()).size() > 3);  // it does draw
    // The draw depends on the sequence's index too: two prompts do not share their samples.
    std::vector<int32_t> sequence4;
    for (uint64_t step = 0; step < 200; ++step) {
      sequence4.push_back(sample_token(logits, {1.0, 0, 1.0, 42}, 4, step));
    }
    CHECK(first != sequence4);
  }

  TEST_CASE(
      "generate: draws follow softmax(logits / temperature) within what top-k and top-p keep") {
    const std::vector<float> logits{2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
    const int draws = 40000;
    for (double temperature : {1.0, 0.5}) {
      CAPTURE(temperature);
      std::vector<double> p(logits.size());
      double z = 0;
      for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp(logits[i] / temperature);
      std::vector<int> count(logits.size(), 0);
      for (int d = 0; d < draws; ++d) {
        ++count[static_cast<size_t>(sample_token(logits, {temperature, 0, 1.0, 5}, 0, d))];
      }
      for (size_t i = 0; i < logits.size(); ++i) {
        CHECK(std::abs(count[i] / double(draws) - p[i] / z) < 0.01);
      }
    }
    // top-k 2: only the two largest, in their renormalised proportion e^2 : e^1.
    std::map<int32_t, int> top2;
    for (int d = 0; d < draws; ++d) ++top2[sample_token(logits, {1.0, 2, 1.0, 6}, 0, d)];
    CHECK(top2.size() == 2);
    CHECK(std::abs(top2[0] / double(draws) - std::exp(2.0) / (std::exp(2.0) + std::exp(1.0))) <
          0.01);
    // top-p: softmax(logits) is 0.563, 0.207, 0.126, 0.076, 0.028; p = 0.7 keeps the two
    // whose sum first reaches it (0.770), p = 0.5 keeps the first alone.
    std::set<int32_t> nucleus;
    for (int d = 0; d < 2000; ++d) nucleus.insert(sample_token(logits, {1.0, 0, 0.7, 8}, 0, d));
    CHECK(nucleus == std::set<int32_t>{0, 1});
    for (int d = 0; d < 200; ++d) CHECK(sample_token(logits, {1.0, 0, 0.5, 8}, 0, d) == 0);
    // top-k before top-p: top-k 3 renormalises to 0.630, 0.232, 0.141; p = 0.85 keeps 2.
    std::set<int32_t> both;
    for (int d = 0; d < 2000; ++d) both.insert(sample_token(logits, {1.0, 3, 0.85, 9}, 0, d));
    CHECK(both == std::set<int32_t>{0, 1});
  }
}
