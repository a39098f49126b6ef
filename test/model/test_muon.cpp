// Muon against Muon written out in plain double loops (Jordan et al.'s algorithm, no BLAS, no
// titan op): Newton–Schulz alone, wide and tall; then two whole optimizer steps over a fused
// matrix (two parts), a plain one and a norm, where the norm must take AdamW's step.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "model/ops/newton_schulz.h"
#include "model/optim/adamw_optimizer.h"
#include "model/optim/muon_optimizer.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace muon_test {

using Matrix = std::vector<std::vector<double>>;

Matrix to_matrix(const Tensor& t, int64_t row_begin, int64_t rows) {
  const int64_t cols = t.size(1);
  Matrix m(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) m[r][c] = t.data<double>()[(row_begin + r) * cols + c];
  }
  return m;
}

Matrix multiply(const Matrix& a, const Matrix& b) {
  Matrix out(a.size(), std::vector<double>(b[0].size(), 0.0));
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t k = 0; k < b.size(); ++k) {
      for (size_t j = 0; j < b[0].size(); ++j) out[i][j] += a[i][k] * b[k][j];
    }
  }
  return out;
}

Matrix transpose(const Matrix& a) {
  Matrix out(a[0].size(), std::vector<double>(a.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[0].size(); ++j) out[j][i] = a[i][j];
  }
  return out;
}

// The published iteration, on the transpose when the matrix is tall.
Matrix newton_schulz_reference(Matrix x, int steps) {
  const bool tall = x.size() > x[0].size();
  if (tall) x = transpose(x);
  double norm = 0;
  for (const auto& row : x) {
    for (double v : row) norm += v * v;
  }
  norm = std::sqrt(norm) + 1e-7;
  for (auto& row : x) {
    for (double& v : row) v /= norm;
  }
  for (int k = 0; k < steps; ++k) {
    const Matrix a = multiply(x, transpose(x));
    const Matrix aa = multiply(a, a);
    Matrix b = a;
    for (size_t i = 0; i < b.size(); ++i) {
      for (size_t j = 0; j < b.size(); ++j) b[i][j] = -4.7750 * a[i][j] + 2.0315 * aa[i][j];
    }
    const Matrix bx = multiply(b, x);
    for (size_t i = 0; i < x.size(); ++i) {
      for (size_t j = 0; j < x[0].size(); ++j) x[i][j] = 3.4445 * x[i][j] + bx[i][j];
    }
  }
  return tall ? transpose(x) : x;
}

double worst_difference(const Tensor& t, int64_t row_begin, const Matrix& expected) {
  double worst = 0;
  const int64_t cols = t.size(1);
  for (size_t r = 0; r < expected.size(); ++r) {
    for (size_t c = 0; c < expected[0].size(); ++c) {
      const double got = t.data<double>()[(row_begin + static_cast<int64_t>(r)) * cols +
                                          static_cast<int64_t>(c)];
      worst = std::max(worst, std::abs(got - expected[r][c]));
    }
  }
  return worst;
}

Parameter make(Parameter p, uint64_t seed) {
  allocate_parameter(p);
  p.value.copy_from(testing::random_tensor(p.shape, DType::F64, seed, 0.02));
  return p;
}

}  // namespace muon_test

using namespace muon_test;

TEST_SUITE("fast") {
  TEST_CASE("newton_schulz5 equals the iteration written out in double on wide and tall matrices") {
    for (const Shape& shape : {Shape{6, 10}, Shape{10, 6}, Shape{7, 7}}) {
      const Tensor g = testing::random_tensor(shape, DType::F64, 3);
      const Matrix expected = newton_schulz_reference(to_matrix(g, 0, shape[0]), 5);
      const Tensor out = Tensor::empty(shape, DType::F64);
      newton_schulz5(g, out, 5);
      CHECK_MESSAGE(worst_difference(out, 0, expected) < 1e-12, shape);
      // Orthogonalised: the singular values land near 1, so ‖O‖_F² is near min(rows, cols).
      double squares = 0;
      for (double v : testing::to_doubles(out)) squares += v * v;
      const double smaller = static_cast<double>(std::min(shape[0], shape[1]));
      CHECK(squares > 0.4 * smaller);
      CHECK(squares < 1.5 * smaller);
    }
  }

  TEST_CASE("Muon's two steps equal Muon written out with Nesterov momentum per part and AdamW beside") {
    const double lr = 0.03, wd = 0.1, beta = 0.95;
    // A fused block weight of two parts (as w13), a plain one (as wo) and a norm.
    Parameter fused = make(declare_fused_parameter("layers.0.feed_forward.w13.weight",
                                                   {{"layers.0.feed_forward.w1.weight", 5, InitSpec::ones()},
                                                    {"layers.0.feed_forward.w3.weight", 5, InitSpec::ones()}},
                                                   4, DType::F64),
                           1);
    Parameter plain = make(declare_parameter("layers.0.attention.wo.weight", {4, 6},
                                             InitSpec::ones(), DType::F64),
                           2);
    Parameter norm = make(declare_parameter("layers.0.ffn_norm.weight", {4}, InitSpec::ones(),
                                            DType::F64),
                          3);
    Parameter norm_ref = make(declare_parameter("layers.0.ffn_norm.weight", {4}, InitSpec::ones(),
                                                DType::F64),
                              3);
    const AdamWConfig adamw{0.9, 0.95, 1e-8, wd};
    Muon muon({&fused, &plain, &norm}, MuonConfig{}, adamw, {},
              std::make_shared<LocalMatrices>());
    AdamW adamw_ref({&norm_ref}, adamw);
    CHECK(muon.muon_count() == 2);

    std::vector<Matrix> momentum;  // the reference's, per part: w1, w3, wo
    std::vector<Parameter*> matrices{&fused, &plain};
    std::vector<std::vector<int64_t>> parts{{5, 5}, {4}};
    for (int step = 1; step <= 2; ++step) {
      for (Parameter* p : matrices) p->grad.copy_from(testing::random_tensor(p->shape, DType::F64, 10 + step));
      norm.grad.copy_from(testing::random_tensor({4}, DType::F64, 20 + step));
      norm_ref.grad.copy_from(norm.grad);
      // The expected weights, from the weights before the step.
      std::vector<std::vector<Matrix>> expected;
      size_t k = 0;
      for (size_t i = 0; i < matrices.size(); ++i) {
        std::vector<Matrix> per_part;
        int64_t row = 0;
        for (int64_t rows : parts[i]) {
          const Matrix w = to_matrix(matrices[i]->value, row, rows);
          const Matrix g = to_matrix(matrices[i]->grad, row, rows);
          if (momentum.size() <= k) momentum.push_back(Matrix(g.size(), std::vector<double>(g[0].size(), 0.0)));
          Matrix u = g;
          for (size_t r = 0; r < g.size(); ++r) {
            for (size_t c = 0; c < g[0].size(); ++c) {
              momentum[k][r][c] = beta * momentum[k][r][c] + (1 - beta) * g[r][c];
              u[r][c] = (1 - beta) * g[r][c] + beta * momentum[k][r][c];
            }
          }
          const Matrix o = newton_schulz_reference(u, 5);
          const double scale = 0.2 * std::sqrt(static_cast<double>(std::max<size_t>(rows, g[0].size())));
          Matrix next = w;
          for (size_t r = 0; r < w.size(); ++r) {
            for (size_t c = 0; c < w[0].size(); ++c) {
              next[r][c] = w[r][c] * (1 - lr * wd) - lr * scale * o[r][c];
            }
          }
          per_part.push_back(next);
          row += rows;
          ++k;
        }
        expected.push_back(per_part);
      }
      muon.step(lr);
      adamw_ref.step(lr);
      for (size_t i = 0; i < matrices.size(); ++i) {
        int64_t row = 0;
        for (size_t j = 0; j < parts[i].size(); ++j) {
          CHECK_MESSAGE(worst_difference(matrices[i]->value, row, expected[i][j]) < 1e-14,
                        matrices[i]->name << " part " << j << " step " << step);
          row += parts[i][j];
        }
      }
      CHECK(testing::bitwise_equal(norm.value, norm_ref.value));
    }
    CHECK(muon.steps_taken() == 2);
    // State: one momentum per matrix, two moments for the norm.
    CHECK(muon.state_bytes() == (10 * 4 + 4 * 6 + 2 * 4) * 8);
    CHECK(muon.state_of(0).size() == 1);
    CHECK(std::string(muon.state_of(0)[0].suffix) == ".momentum_buffer");
    CHECK(muon.state_of(2).size() == 2);
  }

  TEST_CASE("Muon picks the blocks' weight matrices and leaves the rest to AdamW") {
    CHECK(is_muon_matrix("layers.3.attention.wqkv.weight"));
    CHECK(is_muon_matrix("layers.3.attention.wo.weight"));
    CHECK(is_muon_matrix("layers.11.feed_forward.w13.weight"));
    CHECK(is_muon_matrix("layers.0.feed_forward.w2.weight"));
    CHECK_FALSE(is_muon_matrix("tok_embeddings.weight"));
    CHECK_FALSE(is_muon_matrix("output.weight"));
    CHECK_FALSE(is_muon_matrix("layers.0.attention_norm.weight"));
    CHECK(muon_update_scale(MuonScale::MatchAdamW, 256, 768) == doctest::Approx(0.2 * std::sqrt(768.0)));
    CHECK(muon_update_scale(MuonScale::Shape, 768, 256) == doctest::Approx(std::sqrt(3.0)));
    CHECK(muon_update_scale(MuonScale::Shape, 256, 768) == 1.0);
  }
}
