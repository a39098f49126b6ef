// Philox4x32-10 and the counter-based generator built on it (core/rng.h).
//
// The block function is held to Random123's published known-answer vectors (kat_vectors), so
// our initialisation draws are the same as any other Philox implementation's for the same
// counter and key. CounterRng's draws are checked for purity (a function of seed, stream and
// index only) and for their distributions, with the tolerances stated next to each check; the
// normal transform's own logarithm and cosine (core/philox.h) against the C library's in long
// double.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/rng.h"

namespace titan {

TEST_SUITE("fast") {
  TEST_CASE("philox4x32_10: Random123 known-answer vectors") {
    SUBCASE("zero counter, zero key") {
      PhiloxCounter out = philox4x32_10({0, 0, 0, 0}, {0, 0});
      CHECK(out == PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
    }
    SUBCASE("all-ones counter and key") {
      PhiloxCounter out = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                        {0xffffffffu, 0xffffffffu});
      CHECK(out == PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
    }
    SUBCASE("digits of pi") {
      PhiloxCounter out = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                        {0xa4093822u, 0x299f31d0u});
      CHECK(out == PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
    }
  }

  TEST_CASE("hash_name: 64-bit FNV-1a reference values") {
    CHECK(hash_name("") == 0xcbf29ce484222325ull);
    CHECK(hash_name("a") == 0xaf63dc4c8601ec8cull);
    CHECK(hash_name("foobar") == 0x85944171f73967e8ull);
  }

  TEST_CASE("CounterRng: a draw is a pure function of seed and stream name and index and draw") {
    CounterRng a(1234, "layers.0.attention.wq.weight");
    CounterRng b(1234, "layers.0.attention.wq.weight");
    for (uint64_t i = 0; i < 1000; ++i) {
      CHECK(a.bits64(i) == b.bits64(i));
      CHECK(a.uniform(i) == b.uniform(i));
      CHECK(a.normal(i) == b.normal(i));
    }
    // Indices past 2^32 use the counter's second word.
    uint64_t far = (uint64_t{1} << 40) + 17;
    CHECK(a.bits64(far) == b.bits64(far));
    CHECK(a.bits64(far) != a.bits64(17));
  }

  TEST_CASE(
      "CounterRng: different seeds or stream names or indices or draws give different streams") {
    CounterRng base(1, "stream");
    CounterRng other_seed(2, "stream");
    CounterRng other_name(1, "stream2");
    int same_seed_hits = 0, same_name_hits = 0, same_draw_hits = 0;
    const int n = 1000;
    for (uint64_t i = 0; i < n; ++i) {
      same_seed_hits += base.bits64(i) == other_seed.bits64(i);
      same_name_hits += base.bits64(i) == other_name.bits64(i);
      same_draw_hits += base.bits64(i, 0) == base.bits64(i, 1);
    }
    // 64-bit words agree by chance with probability 2^-64 each.
    CHECK(same_seed_hits == 0);
    CHECK(same_name_hits == 0);
    CHECK(same_draw_hits == 0);
    // Adjacent seeds must not give shifted copies of one stream.
    CHECK(base.bits64(1) != other_seed.bits64(0));
    CHECK(base.bits64(0) != base.bits64(1));
  }

  TEST_CASE("CounterRng: the draw at index i does not depend on which other indices were drawn") {
    CounterRng rng(7, "order");
    std::vector<double> forward(500);
    for (uint64_t i = 0; i < 500; ++i) forward[i] = rng.normal(i);
    CounterRng fresh(7, "order");
    // Backwards, and with unrelated draws interleaved.
    for (uint64_t i = 500; i-- > 0;) {
      (void)fresh.uniform(i * 7919 + 3);
      CHECK(fresh.normal(i) == forward[i]);
    }
  }

  TEST_CASE("CounterRng: uniform lies strictly between 0 and 1 with mean 1/2") {
    CounterRng rng(42, "uniform");
    const int n = 200000;
    double sum = 0, lo = 1, hi = 0;
    int outside = 0;
    for (int i = 0; i < n; ++i) {
      double u = rng.uniform(static_cast<uint64_t>(i));
      outside += !(u > 0.0 && u < 1.0);
      sum += u;
      lo = std::min(lo, u);
      hi = std::max(hi, u);
    }
    // The mean's standard error is sqrt(1/12 / n) = 0.00065; 0.005 is over 7 of them.
    CHECK(outside == 0);
    CHECK(std::fabs(sum / n - 0.5) < 0.005);
    CHECK(lo < 1e-4);
    CHECK(hi > 1 - 1e-4);
  }

  TEST_CASE("CounterRng: normal has mean 0 and standard deviation 1") {
    CounterRng rng(42, "normal");
    const int n = 200000;
    double sum = 0, sum_sq = 0;
    int beyond_3 = 0, not_finite = 0;
    for (int i = 0; i < n; ++i) {
      double x = rng.normal(static_cast<uint64_t>(i));
      not_finite += !std::isfinite(x);
      sum += x;
      sum_sq += x * x;
      beyond_3 += std::fabs(x) > 3.0;
    }
    double mean = sum / n;
    double std = std::sqrt(sum_sq / n - mean * mean);
    CHECK(not_finite == 0);
    // Standard errors: 0.0022 for the mean, 0.0016 for the std; the bounds are 4.5 and 6 of them.
    CHECK(std::fabs(mean) < 0.01);
    CHECK(std::fabs(std - 1.0) < 0.01);
    // P(|x| > 3) = 0.0027, i.e. 540 expected; a wrong tail would miss this by far.
    CHECK(beyond_3 > 400);
    CHECK(beyond_3 < 700);
  }

  TEST_CASE("CounterRng: truncated_normal stays inside its interval with the truncated std") {
    CounterRng rng(42, "truncated");
    const int n = 200000;
    double sum = 0, sum_sq = 0;
    int outside = 0;
    for (int i = 0; i < n; ++i) {
      double x = rng.truncated_normal(static_cast<uint64_t>(i), -2.0, 2.0);
      outside += !(x >= -2.0 && x <= 2.0);
      sum += x;
      sum_sq += x * x;
    }
    double mean = sum / n;
    double std = std::sqrt(sum_sq / n - mean * mean);
    CHECK(outside == 0);
    // Var of N(0,1) on [-2, 2] is 1 - 2·2·φ(2)/(Φ(2) - Φ(-2)) = 0.77374, std 0.87962.
    CHECK(std::fabs(mean) < 0.01);
    CHECK(std::fabs(std - 0.87962) < 0.01);

    // An asymmetric interval holding more than half the mass.
    int outside_asymmetric = 0;
    for (uint64_t i = 0; i < 10000; ++i) {
      double x = rng.truncated_normal(i, -0.5, 3.0);
      outside_asymmetric += !(x >= -0.5 && x <= 3.0);
    }
    CHECK(outside_asymmetric == 0);
    // Pure in the index, like every other draw.
    CHECK(rng.truncated_normal(5, -2.0, 2.0) ==
          CounterRng(42, "truncated").truncated_normal(5, -2.0, 2.0));
  }

  TEST_CASE("philox: the transform's own logarithm and cosine are within a few ulps of libm's") {
    // ln(m·2^-53) over the ends of the range, around every power of two, and a spread between.
    std::vector<uint64_t> ms = {1, 2, 3, (uint64_t{1} << 53) - 1, (uint64_t{1} << 52) + 1};
    for (int e = 1; e < 53; ++e) {
      for (int64_t d = -2; d <= 2; ++d) ms.push_back((uint64_t{1} << e) + static_cast<uint64_t>(d));
    }
    CounterRng rng(3, "log");
    for (uint64_t i = 0; i < 20000; ++i) ms.push_back((rng.bits64(i) >> 11) | 1);
    double worst_log = 0;
    for (uint64_t m : ms) {
      if (m == 0 || m >= (uint64_t{1} << 53)) continue;
      // log1p of u − 1, which long double holds exactly: no cancellation near u = 1.
      const long double exact = std::log1p((static_cast<long double>(m) - 0x1.0p53L) * 0x1.0p-53L);
      const double got = philox::log_of_53bit(m);
      worst_log = std::max(worst_log, static_cast<double>(std::fabs((got - exact) / exact)));
    }
    INFO("worst relative error of ln: ", worst_log);
    // A few ulps (3.9e-16 measured); a wrong coefficient or reduction step gives 1e-12 or more.
    CHECK(worst_log < 8e-16);
    // cos(2πt) for t = a·2^-64 + 2^-65 over every quadrant, the folds at π/4 and the ends.
    std::vector<uint64_t> as = {0,
                                ~uint64_t{0},
                                uint64_t{1} << 62,
                                uint64_t{1} << 63,
                                (uint64_t{1} << 61) - 1,
                                uint64_t{1} << 61,
                                uint64_t{3} << 61};
    for (uint64_t i = 0; i < 20000; ++i) as.push_back(rng.bits64(i, 1));
    double worst_cos = 0;
    for (uint64_t a : as) {
      // The angle the function takes: the top 53 bits of a, plus half a step.
      const long double turn = (static_cast<long double>(a >> 11) + 0.5L) * 0x1.0p-53L;
      const long double exact = std::cos(2 * 3.14159265358979323846264338327950288L * turn);
      worst_cos =
          std::max(worst_cos, static_cast<double>(std::fabs(philox::cos_of_turn(a) - exact)));
    }
    INFO("worst absolute error of cos: ", worst_cos);
    CHECK(worst_cos < 8e-16);  // 1.5e-16 measured
  }

  TEST_CASE("CounterRng: normal has the tails and the CDF of N(0 1)") {
    CounterRng rng(2024, "tails");
    const int n = 400000;
    std::vector<double> x(n);
    double m3 = 0, m4 = 0;
    int beyond[5] = {0, 0, 0, 0, 0};  // |x| > 1, 2, 3, 4, 5
    for (int i = 0; i < n; ++i) {
      x[i] = rng.normal(static_cast<uint64_t>(i));
      m3 += x[i] * x[i] * x[i];
      m4 += x[i] * x[i] * x[i] * x[i];
      for (int k = 0; k < 5; ++k) beyond[k] += std::fabs(x[i]) > k + 1;
    }
    // Skewness 0 and kurtosis 3, standard errors sqrt(15/n) = 0.006 and sqrt(96/n) = 0.015.
    CHECK(std::fabs(m3 / n) < 0.03);
    CHECK(std::fabs(m4 / n - 3.0) < 0.08);
    // Each tail count against n·P(|x| > k) = n·erfc(k/√2), within 5 binomial standard deviations
    // (and at most 3 past 5σ, where 0.23 are expected).
    for (int k = 0; k < 4; ++k) {
      const double p = std::erfc((k + 1) / std::sqrt(2.0));
      const double expected = n * p, sd = std::sqrt(n * p * (1 - p));
      INFO("|x| > ", k + 1, ": ", beyond[k], " against ", expected);
      CHECK(std::fabs(beyond[k] - expected) < 5 * sd + 1);
    }
    CHECK(beyond[4] <= 3);
    // Kolmogorov–Smirnov: the largest gap between the sample's CDF and Φ. Its 0.1% critical
    // value is 1.95/√n = 0.0031.
    std::sort(x.begin(), x.end());
    double ks = 0;
    for (int i = 0; i < n; ++i) {
      const double phi = 0.5 * std::erfc(-x[i] / std::sqrt(2.0));
      ks = std::max({ks, std::fabs(phi - static_cast<double>(i) / n),
                     std::fabs(phi - static_cast<double>(i + 1) / n)});
    }
    INFO("KS distance ", ks);
    CHECK(ks < 1.95 / std::sqrt(static_cast<double>(n)));
  }

  TEST_CASE("CounterRng: truncated_normal has the truncated moments and reaches its bounds") {
    // N(0,1) on [a, b]: mean (φ(a) − φ(b))/Z, variance 1 + (aφ(a) − bφ(b))/Z − mean²,
    // Z = Φ(b) − Φ(a). A cut of [-0.7, 1.5] rejects 35% of draws, so the later draws are used.
    const double a = -0.7, b = 1.5;
    auto phi = [](double v) {
      return std::exp(-0.5 * v * v) / std::sqrt(2 * 3.14159265358979323846);
    };
    auto cdf = [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); };
    const double z = cdf(b) - cdf(a);
    const double mean = (phi(a) - phi(b)) / z;
    const double var = 1 + (a * phi(a) - b * phi(b)) / z - mean * mean;
    CounterRng rng(9, "truncated moments");
    const int n = 200000;
    double sum = 0, sum_sq = 0, lo = b, hi = a;
    int outside = 0;
    for (int i = 0; i < n; ++i) {
      const double x = rng.truncated_normal(static_cast<uint64_t>(i), a, b);
      outside += !(x >= a && x <= b);
      sum += x;
      sum_sq += x * x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    const double got_mean = sum / n, got_var = sum_sq / n - got_mean * got_mean;
    CHECK(outside == 0);
    // Standard error of the mean sqrt(var/n) = 0.0015; 0.008 is over 5 of them.
    CHECK(std::fabs(got_mean - mean) < 0.008);
    CHECK(std::fabs(got_var - var) < 0.008);
    // The density at the ends is φ(a)/Z, φ(b)/Z > 0.1: 200000 draws come within 1e-3 of each.
    CHECK(lo < a + 1e-3);
    CHECK(hi > b - 1e-3);
  }

  TEST_CASE("CounterRng: truncated_normal refuses intervals with less than half the mass") {
    CounterRng rng(1, "truncated");
    CHECK_THROWS_AS(rng.truncated_normal(0, 3.0, 4.0), Error);
    CHECK_THROWS_AS(rng.truncated_normal(0, -0.5, 0.5), Error);  // 0.38 of the mass
    CHECK_THROWS_AS(rng.truncated_normal(0, 2.0, -2.0), Error);  // empty
    CHECK_NOTHROW(rng.truncated_normal(0, -0.7, 0.7));           // 0.516 of the mass
  }

}  // TEST_SUITE("fast")

}  // namespace titan
