// A LoRA-adapted linear (model/lora.h) against the merged weight W' = W + s·B·A, part by part,
// computed in plain f64 loops: the output, the input gradient and both factors' gradients, on
// a fused [q; k; v] weight with parts of different heights. Then the same linear cut as tensor
// parallelism cuts it — column-parallel (W's and B's rows), row-parallel (W's and A's columns) —
// where each rank's terms are the columns of the whole or add up to it, as the table in
// model/lora.h says. The base weight is frozen: no gradient, unchanged values.
#include <doctest/doctest.h>

#include <vector>

#include "model/linear.h"
#include "model/lora.h"
#include "model/parameter.h"
#include "support/tensor_testing.h"

// Named, so that a unity build's other test files, with their own helpers, do not clash.
namespace lora_test {

using namespace titan;
using namespace titan::model;

constexpr int64_t kIn = 12, kRank = 3, kTokens = 5;
constexpr double kScale = 2.5;  // alpha / r
const std::vector<int64_t> kPartRows = {8, 4, 4};  // q, k, v

// Row-major [rows, cols] doubles.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  double& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Matrix matrix_of(const Tensor& t) {
  Matrix m(t.size(0), t.size(1));
  m.v = testing::to_doubles(t);
  return m;
}

Tensor tensor_of(const Matrix& m) {
  Tensor t = Tensor::empty({m.rows, m.cols}, DType::F64);
  for (size_t i = 0; i < m.v.size(); ++i) t.data<double>()[i] = m.v[i];
  return t;
}

// a [n, k] · b [k, m]; with transposes as flagged.
Matrix product(const Matrix& a, bool ta, const Matrix& b, bool tb) {
  const int64_t n = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols, m = tb ? b.rows : b.cols;
  Matrix out(n, m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) sum += (ta ? a.at(l, i) : a.at(i, l)) * (tb ? b.at(j, l) : b.at(l, j));
      out.at(i, j) = sum;
    }
  return out;
}

// The oracle: the whole linear's tensors and what LoRA's definition makes of them.
struct Whole {
  Matrix w, a, b, x, dy;               // W [out, in], A [P·r, in], B [out, r], x [T, in], dy [T, out]
  Matrix y, dx, da, db;                // expected
};

Whole make_whole() {
  int64_t out = 0;
  for (int64_t rows : kPartRows) out += rows;
  const int64_t parts = static_cast<int64_t>(kPartRows.size());
  Whole o;
  o.w = matrix_of(testing::random_tensor({out, kIn}, DType::F64, 1));
  o.a = matrix_of(testing::random_tensor({parts * kRank, kIn}, DType::F64, 2));
  o.b = matrix_of(testing::random_tensor({out, kRank}, DType::F64, 3));  // nonzero, as trained
  o.x = matrix_of(testing::random_tensor({kTokens, kIn}, DType::F64, 4));
  o.dy = matrix_of(testing::random_tensor({kTokens, out}, DType::F64, 5));
  // W' = W + s·B_p·A_p on part p's rows; y = x·W'ᵀ, dx = dy·W'.
  Matrix merged = o.w;
  o.da = Matrix(parts * kRank, kIn);
  o.db = Matrix(out, kRank);
  int64_t row0 = 0;
  for (int64_t p = 0; p < parts; ++p) {
    for (int64_t i = 0; i < kPartRows[static_cast<size_t>(p)]; ++i)
      for (int64_t c = 0; c < kIn; ++c)
        for (int64_t j = 0; j < kRank; ++j)
          merged.at(row0 + i, c) += kScale * o.b.at(row0 + i, j) * o.a.at(p * kRank + j, c);
    // dA_p = s·B_pᵀ·dy_pᵀ·x, dB_p = s·dy_pᵀ·x·A_pᵀ.
    for (int64_t j = 0; j < kRank; ++j)
      for (int64_t c = 0; c < kIn; ++c)
        for (int64_t t = 0; t < kTokens; ++t)
          for (int64_t i = 0; i < kPartRows[static_cast<size_t>(p)]; ++i)
            o.da.at(p * kRank + j, c) += kScale * o.b.at(row0 + i, j) * o.dy.at(t, row0 + i) * o.x.at(t, c);
    for (int64_t i = 0; i < kPartRows[static_cast<size_t>(p)]; ++i)
      for (int64_t j = 0; j < kRank; ++j)
        for (int64_t t = 0; t < kTokens; ++t)
          for (int64_t c = 0; c < kIn; ++c)
            o.db.at(row0 + i, j) += kScale * o.dy.at(t, row0 + i) * o.x.at(t, c) * o.a.at(p * kRank + j, c);
    row0 += kPartRows[static_cast<size_t>(p)];
  }
  o.y = product(o.x, false, merged, true);
  o.dx = product(o.dy, false, merged, false);
  return o;
}

// `full` cut to the slice `sliced` holds, through the model's one slice mapping.
Tensor local_of(const Parameter& sliced, const Tensor& full) {
  const Shape local = sliced.local_shape();
  Tensor out = Tensor::empty({local[0], local[1]}, full.dtype());
  for_each_local_run(sliced, 0, local[0], [&](const LocalRun& run) {
    out.narrow(0, run.local_offset, run.rows)
        .copy_from(full.narrow(0, run.full_row, run.rows).narrow(1, run.col_begin, run.width));
  });
  return out;
}

// One rank's adapted linear of the whole one, sliced by `slice` ({} for one rank).
struct AdaptedLinear {
  Parameter w, a, b;
  std::shared_ptr<LowRankAdapter> adapter = std::make_shared<LowRankAdapter>();
  std::unique_ptr<Linear> linear;

  AdaptedLinear(const Whole& whole, const ParamSlice& slice) {
    std::vector<ParamPart> parts;
    const char* names[] = {"q", "k", "v"};
    for (size_t p = 0; p < kPartRows.size(); ++p)
      parts.push_back({std::string("attention.w") + names[p] + ".weight", kPartRows[p], InitSpec::zeros()});
    w = declare_fused_parameter("attention.wqkv.weight", parts, kIn, DType::F64);
    DeclaredAdapter declared = declare_adapter(w, kRank, DType::F64);
    a = std::move(declared.a);
    b = std::move(declared.b);
    w.frozen = true;
    w.slice = slice;
    adapter->a = &a;
    adapter->b = &b;
    adapter->rank = kRank;
    adapter->scale = kScale;
    follow_base_slice(*adapter, slice);
    for (Parameter* p : {&w, &a, &b}) allocate_parameter(*p);
    w.value.copy_from(local_of(w, tensor_of(whole.w)));
    a.value.copy_from(local_of(a, tensor_of(whole.a)));
    b.value.copy_from(local_of(b, tensor_of(whole.b)));
    linear = std::make_unique<Linear>("attention.wqkv", &w);
    linear->set_adapter(adapter);
  }
};

// The columns of a [T, out] (or [T, in]) tensor that `sliced`'s rows (or columns) are.
Tensor local_columns(const Parameter& sliced, const Tensor& full) {
  // A slice's rows of W are y's columns: cut the transpose.
  Tensor transposed = Tensor::empty({full.size(1), full.size(0)}, full.dtype());
  for (int64_t i = 0; i < full.size(0); ++i)
    for (int64_t j = 0; j < full.size(1); ++j)
      transposed.data<double>()[j * full.size(0) + i] = full.data<double>()[i * full.size(1) + j];
  Parameter as_rows = sliced;  // the same parts and slice, over [out, T]
  as_rows.shape = Shape{full.size(1), full.size(0)};
  const Tensor local_t = local_of(as_rows, transposed);
  Tensor out = Tensor::empty({local_t.size(1), local_t.size(0)}, full.dtype());
  for (int64_t i = 0; i < local_t.size(0); ++i)
    for (int64_t j = 0; j < local_t.size(1); ++j)
      out.data<double>()[j * local_t.size(0) + i] = local_t.data<double>()[i * local_t.size(1) + j];
  return out;
}

constexpr testing::Tolerance kTol{1e-12, 1e-12};

TEST_SUITE("fast") {
  TEST_CASE("LoRA: an adapted fused linear computes the merged weight's output and gradients") {
    const Whole whole = make_whole();
    AdaptedLinear one(whole, {});
    const Tensor w_before = one.w.value.clone();
    const Tensor y = one.linear->forward(tensor_of(whole.x));
    CHECK_CLOSE_TENSORS(y, tensor_of(whole.y), kTol, "y");
    const Tensor dx = one.linear->backward(tensor_of(whole.dy), tensor_of(whole.x));
    CHECK_CLOSE_TENSORS(dx, tensor_of(whole.dx), kTol, "dx");
    CHECK_CLOSE_TENSORS(one.a.grad, tensor_of(whole.da), kTol, "dA");
    CHECK_CLOSE_TENSORS(one.b.grad, tensor_of(whole.db), kTol, "dB");
    CHECK_FALSE(one.w.grad.defined());
    CHECK(testing::bitwise_equal(one.w.value, w_before));
    // Every part's adapter is its own: the adapted output differs from the base's in each part.
    const Matrix base_y = product(whole.x, false, whole.w, true);
    int64_t row0 = 0;
    for (int64_t rows : kPartRows) {
      CHECK(base_y.at(0, row0) != doctest::Approx(whole.y.at(0, row0)));
      row0 += rows;
    }
  }

  TEST_CASE("LoRA: an adapter starts with B = 0 so that the adapted model starts as the base model") {
    Parameter w = declare_parameter("layers.0.attention.wo.weight", {6, 10}, InitSpec::zeros(), DType::F64);
    const DeclaredAdapter declared = declare_adapter(w, 2, DType::F64);
    CHECK(declared.a.name == "layers.0.attention.wo.lora_a.weight");
    CHECK(declared.b.name == "layers.0.attention.wo.lora_b.weight");
    CHECK(declared.a.shape == Shape{2, 10});
    CHECK(declared.b.shape == Shape{6, 2});
    CHECK(declared.a.adapter);
    CHECK(declared.b.parts[0].init.kind == InitKind::Zeros);
    CHECK(declared.a.parts[0].init.kind != InitKind::Zeros);
  }

  TEST_CASE("LoRA: column- and row-parallel slices of an adapted linear add up to the whole one") {
    const Whole whole = make_whole();
    // Column-parallel: each rank's y columns and its B rows are the whole's; x, dx partial over
    // ranks (the style reduce-scatters dx), A's gradient too (A is replicated).
    Tensor dx_sum = Tensor::zeros({kTokens, kIn}, DType::F64);
    Tensor da_sum = Tensor::zeros({static_cast<int64_t>(kPartRows.size()) * kRank, kIn}, DType::F64);
    for (int64_t rank = 0; rank < 2; ++rank) {
      CAPTURE(rank);
      AdaptedLinear column(whole, {.dim = 0, .index = rank, .count = 2});
      CHECK(column.b.slice.dim == 0);
      CHECK(column.a.slice.dim == -1);
      const Tensor y = column.linear->forward(tensor_of(whole.x));
      CHECK_CLOSE_TENSORS(y, local_columns(column.w, tensor_of(whole.y)), kTol, "column y");
      const Tensor dy_local = local_columns(column.w, tensor_of(whole.dy));
      const Tensor dx = column.linear->backward(dy_local, tensor_of(whole.x));
      for (int64_t i = 0; i < dx.numel(); ++i) dx_sum.data<double>()[i] += dx.data<double>()[i];
      for (int64_t i = 0; i < da_sum.numel(); ++i) da_sum.data<double>()[i] += column.a.grad.data<double>()[i];
      CHECK_CLOSE_TENSORS(column.b.grad, local_of(column.b, tensor_of(whole.db)), kTol, "column dB");
    }
    CHECK_CLOSE_TENSORS(dx_sum, tensor_of(whole.dx), kTol, "column dx summed");
    CHECK_CLOSE_TENSORS(da_sum, tensor_of(whole.da), kTol, "column dA summed");

    // Row-parallel: each rank holds x's and W's and A's columns; y and B's gradient are partial
    // sums (the style reduce-scatters y; B is replicated), dx and dA columns of the whole's.
    int64_t out = 0;
    for (int64_t rows : kPartRows) out += rows;
    Tensor y_sum = Tensor::zeros({kTokens, out}, DType::F64);
    Tensor db_sum = Tensor::zeros({out, kRank}, DType::F64);
    for (int64_t rank = 0; rank < 2; ++rank) {
      CAPTURE(rank);
      AdaptedLinear row(whole, {.dim = 1, .index = rank, .count = 2});
      CHECK(row.a.slice.dim == 1);
      CHECK(row.b.slice.dim == -1);
      const Tensor x_local = tensor_of(whole.x).narrow(1, rank * kIn / 2, kIn / 2).clone();
      const Tensor y = row.linear->forward(x_local);
      for (int64_t i = 0; i < y.numel(); ++i) y_sum.data<double>()[i] += y.data<double>()[i];
      const Tensor dx = row.linear->backward(tensor_of(whole.dy), x_local);
      CHECK_CLOSE_TENSORS(dx, tensor_of(whole.dx).narrow(1, rank * kIn / 2, kIn / 2).clone(), kTol,
                          "row dx");
      CHECK_CLOSE_TENSORS(row.a.grad, local_of(row.a, tensor_of(whole.da)), kTol, "row dA");
      for (int64_t i = 0; i < db_sum.numel(); ++i) db_sum.data<double>()[i] += row.b.grad.data<double>()[i];
    }
    CHECK_CLOSE_TENSORS(y_sum, tensor_of(whole.y), kTol, "row y summed");
    CHECK_CLOSE_TENSORS(db_sum, tensor_of(whole.db), kTol, "row dB summed");
  }
}

}  // namespace lora_test
