// Finite-difference gradient checks, "checked in double".
//
// A case runs an op on inputs of the dtype under test (f32 or f64) and returns one output; the
// scalar under test is L = Σ out ⊙ w for a fixed random w, so that dout = w. The reference is
// always the central difference of L computed with the f64 op, so a float kernel is held to the
// exact gradient, not to its own rounding, within a tolerance that states float's precision.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "support/tensor_testing.h"

namespace titan::testing {

struct GradCase {
  std::string name;
  std::vector<Tensor> inputs;  // floating inputs in f64 (cast to the tested dtype); others as is
  std::vector<bool> checked;   // which inputs have their gradient checked
  // Runs the op; must not modify its inputs.
  std::function<Tensor(const std::vector<Tensor>& inputs)> forward;
  // The gradient of Σ out ⊙ dout with respect to each input (undefined where not checked).
  std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const Tensor& dout)>
      backward;
  // At most this many elements per input are perturbed (spread over the tensor); 0: all.
  int64_t max_elements = 0;
  double step = 1e-5;  // central-difference step, in double
};

struct GradCheckResult {
  double max_abs = 0;
  double max_rel = 0;
};

// CHECKs every checked input's gradient against finite differences; returns the worst errors.
GradCheckResult check_gradients(const GradCase& c, DType dtype, Tolerance tol);

// What a gradient check accepts: f64 gradients match central differences to ~1e-9, f32 ones to
// float precision.
inline Tolerance gradient_tolerance(DType dtype) {
  return dtype == DType::F64 ? Tolerance{1e-8, 1e-6} : Tolerance{2e-4, 2e-3};
}

}  // namespace titan::testing
