#include "model/ops/newton_schulz.h"

#include <cmath>

#include "core/cast.h"
#include "core/check.h"
#include "core/gemm.h"
#include "model/ops/tensor_math.h"

namespace titan::model {

void newton_schulz5(const Tensor& g, const Tensor& out, int steps) {
  TT_CHECK(g.ndim() == 2 && g.is_contiguous(), "newton_schulz5: g must be a contiguous matrix, got ",
           g);
  check_tensor(out, "newton_schulz5 out", g.shape(), g.dtype());
  TT_CHECK(steps >= 0, "newton_schulz5: ", steps, " steps");
  const bool cuda = g.device().is_cuda();
  TT_CHECK(cuda ? g.dtype() == DType::F32 : (g.dtype() == DType::F32 || g.dtype() == DType::F64),
           "newton_schulz5: ", dtype_name(g.dtype()), " on ", g.device().str(),
           "; f32 or f64 on the CPU, f32 on CUDA");
  const DType work = cuda ? DType::BF16 : g.dtype();
  const int64_t rows = g.size(0), cols = g.size(1);
  const bool tall = rows > cols;
  const int64_t small = tall ? cols : rows;  // the side of the Gram matrix

  Tensor x = cast(g, work);  // a copy: g is left as it was until out is written
  const double norm = std::sqrt(sum_of_squares(x));
  scale_inplace(x, 1.0 / (norm + 1e-7));
  Tensor next = Tensor::empty(x.shape(), work, g.device());
  Tensor a = Tensor::empty({small, small}, work, g.device());
  Tensor b = Tensor::empty({small, small}, work, g.device());
  for (int k = 0; k < steps; ++k) {
    if (tall) {
      gemm(x, /*transpose_a=*/true, x, false, a);  // A = Xᵀ·X
    } else {
      gemm(x, false, x, /*transpose_b=*/true, a);  // A = X·Xᵀ
    }
    b.copy_from(a);
    gemm(a, false, a, false, b, kNewtonSchulzC, kNewtonSchulzB);  // B = b·A + c·A·A
    next.copy_from(x);
    if (tall) {
      gemm(x, false, b, false, next, 1.0, kNewtonSchulzA);  // X = a·X + X·B
    } else {
      gemm(b, false, x, false, next, 1.0, kNewtonSchulzA);  // X = a·X + B·X
    }
    std::swap(x, next);
  }
  if (work == out.dtype()) {
    out.copy_from(x);
  } else {
    cast_into(out, x);
  }
}

}  // namespace titan::model
