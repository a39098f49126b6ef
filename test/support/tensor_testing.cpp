#include "support/tensor_testing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/cast.h"
#include "core/rng.h"

namespace titan::testing {

void fill_random(const Tensor& t, uint64_t seed, double scale) {
  CounterRng rng(seed, "test");
  Tensor values = Tensor::empty(t.shape(), DType::F64);
  for (int64_t i = 0; i < t.numel(); ++i) {
    values.data<double>()[i] = scale * (2.0 * rng.uniform(static_cast<uint64_t>(i)) - 1.0);
  }
  t.copy_from(cast(values, t.dtype()));
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_random(t, seed, scale);
  return t;
}

Tensor random_tokens(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed) {
  CounterRng rng(seed, "tokens");
  Tensor t = Tensor::empty({batch, seq_len}, DType::I32);
  for (int64_t i = 0; i < batch * seq_len; ++i) {
    t.data<int32_t>()[i] =
        static_cast<int32_t>(rng.bits64(static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  }
  return t;
}

Tensor bf16_values(const Tensor& x) { return cast(cast(x, DType::BF16), DType::F32); }

std::vector<double> to_doubles(const Tensor& t) {
  Tensor d = cast(t.to(Device::cpu()), DType::F64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

double relative_l2_error(const Tensor& actual, const Tensor& expected) {
  TT_CHECK(actual.shape() == expected.shape(), "relative_l2_error: shape ", actual.shape(), " vs ",
           expected.shape());
  std::vector<double> a = to_doubles(actual), e = to_doubles(expected);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - e[i]) * (a[i] - e[i]);
    norm += e[i] * e[i];
  }
  double error = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  return std::isnan(error) ? std::numeric_limits<double>::infinity() : error;
}

Comparison compare(const Tensor& actual, const Tensor& expected, Tolerance tol,
                   const std::string& what) {
  Comparison result;
  std::ostringstream report;
  if (actual.shape() != expected.shape()) {
    result.ok = false;
    report << what << ": shape " << actual.shape() << " vs expected " << expected.shape();
    result.report = report.str();
    return result;
  }
  std::vector<double> a = to_doubles(actual), e = to_doubles(expected);
  int mismatches = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double abs_err = std::fabs(a[i] - e[i]);
    double rel_err = abs_err / std::max(std::fabs(e[i]), 1e-30);
    result.max_abs = std::max(result.max_abs, abs_err);
    if (std::fabs(e[i]) > tol.abs) result.max_rel = std::max(result.max_rel, rel_err);
    bool bad = !(abs_err <= tol.abs + tol.rel * std::fabs(e[i]));  // NaN counts as bad
    if (bad && mismatches++ < 5) {
      report << "\n  [" << i << "] got " << a[i] << ", expected " << e[i];
    }
  }
  if (mismatches > 0) {
    result.ok = false;
    std::ostringstream head;
    head.precision(3);
    head << what << ": " << mismatches << " of " << a.size() << " elements outside tolerance (abs "
         << tol.abs << ", rel " << tol.rel << "); max abs err " << result.max_abs
         << ", max rel err " << result.max_rel;
    result.report = head.str() + report.str();
  }
  return result;
}

Tensor document_starts_of(const std::vector<std::vector<int64_t>>& lengths, int64_t seq_len) {
  Tensor t = Tensor::empty({static_cast<int64_t>(lengths.size()), seq_len}, DType::I32);
  for (size_t b = 0; b < lengths.size(); ++b) {
    int64_t pos = 0;
    for (int64_t n : lengths[b]) {
      TT_CHECK(n > 0 && pos + n <= seq_len, "document_starts_of: documents of sequence ", b,
               " overrun its ", seq_len, " tokens");
      std::fill_n(t.data<int32_t>() + static_cast<int64_t>(b) * seq_len + pos, n,
                  static_cast<int32_t>(pos));
      pos += n;
    }
    TT_CHECK(pos == seq_len, "document_starts_of: the documents of sequence ", b, " hold ", pos,
             " tokens, not ", seq_len);
  }
  return t;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

}  // namespace titan::testing
