// The fused producers of fp8/producer_quantize.h on CUDA: RMSNorm (with and without the residual
// add), SwiGLU, dSwiGLU and the norm's backward with their output's FP8 quantization in the
// same kernel. Each must store exactly what the op's own kernel stores (the same row kernel
// runs, thread for thread: bit for bit), and codes and scales bit-identical to the CPU
// quantizing those stored values (quantize_output, the second half of the CPU twin) — as the
// quantize kernels are to the CPU's. Widths of 4096 (the 8B model's D) and 96 (a partial 1×128
// block) take the fused kernels; 77 (not whole 16-byte packs) takes the composition on the
// device, which must agree just the same.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include "core/cast.h"
#include "fp8/float8_tensor.h"
#include "fp8/producer_quantize.h"
#include "fp8/recipe.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/swiglu.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::fp8;
using titan::testing::bitwise_equal;

namespace {

const Device kProducerGpu = Device::cuda(0);

// Another tp rank holding 4 × this one's amax (the reduction of an FP8 linear's activation).
struct FourfoldReduction final : AmaxReduction {
  int calls = 0;
  void reduce_max(const Tensor& amax) override {
    ++calls;
    Tensor host = amax.to(Device::cpu());
    host.data<float>()[0] *= 4.0f;
    amax.copy_from(host.to(amax.device()));
  }
};

struct ScalingCase {
  const char* name;
  OperandScaling scaling;
  bool transposed;
  bool reduced;
};
const ScalingCase kScalings[] = {
    {"tensorwise e4m3", {Granularity::Tensorwise, Format::E4M3, false}, false, false},
    {"tensorwise e5m2 with its transpose",
     {Granularity::Tensorwise, Format::E5M2, false},
     true,
     false},
    {"tensorwise e5m2 reduced over tp, with its transpose",
     {Granularity::Tensorwise, Format::E5M2, false},
     true,
     true},
    {"rowwise", {Granularity::Rowwise, Format::E4M3, true}, false, false},
    {"1x128", {Granularity::Block1x128, Format::E4M3, false}, false, false},
};

// A CUDA tensor of `dtype` from random f32 values, whose magnitude changes by powers of two
// from row to row (so rows and blocks get different scales).
Tensor random_gpu(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Tensor t = testing::random_tensor(shape, DType::F32, seed, scale);
  const int64_t cols = shape.ndim() == 2 ? shape[1] : shape.numel();
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] *= static_cast<float>(1 << ((i / cols) % 7));
  }
  return cast(t, dtype).to(kProducerGpu);
}

Tensor poisoned_on_gpu(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, kProducerGpu);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

Tensor to_host(const Tensor& t) { return t.to(Device::cpu()); }
// The values a GPU tensor holds, as the f32 CPU tensor the CPU quantizes.
Tensor host_f32(const Tensor& t) { return cast(to_host(t), DType::F32); }

bool same_bits(const Tensor& gpu_a, const Tensor& gpu_b) {
  return bitwise_equal(to_host(gpu_a), to_host(gpu_b));
}

// The GPU's codes and scales against the CPU quantizing the output the GPU stored.
void check_codes(const ProducedFloat8& gpu, const Tensor& stored, const ScalingCase& c,
                 const std::string& what) {
  INFO(what);
  FourfoldReduction cpu_reduction;
  ProducerQuantization q{c.scaling, c.transposed, c.reduced ? &cpu_reduction : nullptr};
  const ProducedFloat8 cpu = quantize_output(host_f32(stored), q);
  CHECK(gpu.codes.granularity == cpu.codes.granularity);
  CHECK(gpu.codes.format == cpu.codes.format);
  CHECK(bitwise_equal(to_host(gpu.codes.scales), cpu.codes.scales));
  CHECK(bitwise_equal(to_host(gpu.codes.codes), cpu.codes.codes));
  CHECK(gpu.transposed.codes.defined() == c.transposed);
  if (c.transposed) {
    CHECK(bitwise_equal(to_host(gpu.transposed.scales), cpu.transposed.scales));
    CHECK(bitwise_equal(to_host(gpu.transposed.codes), cpu.transposed.codes));
  }
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: fused producers store the op's bits and the CPU's codes and scales") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t rows = 257;
    const double eps = 1e-5;
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int64_t dim : {4096, 96, 77}) {
        for (const ScalingCase& c : kScalings) {
          CAPTURE(dtype_name(dt));
          CAPTURE(dim);
          CAPTURE(c.name);
          FourfoldReduction reduction;
          const ProducerQuantization q{c.scaling, c.transposed, c.reduced ? &reduction : nullptr};
          const Tensor x = random_gpu({rows, dim}, dt, 1, 2.0), weight = random_gpu({dim}, dt, 2);
          const Tensor residual = random_gpu({rows, dim}, dt, 3);

          // RMSNorm.
          Tensor y = poisoned_on_gpu({rows, dim}, dt), rstd = poisoned_on_gpu({rows}, DType::F32);
          const ProducedFloat8 pn = rmsnorm_forward_quantized(y, rstd, x, weight, eps, q);
          Tensor y_op = poisoned_on_gpu({rows, dim}, dt), rstd_op = poisoned_on_gpu({rows}, DType::F32);
          model::rmsnorm_forward(y_op, rstd_op, x, weight, eps);
          CHECK(same_bits(y, y_op));
          CHECK(same_bits(rstd, rstd_op));
          check_codes(pn, y, c, "rmsnorm_forward");

          // The residual add and the norm of the sum.
          Tensor h = x.clone(), h_op = x.clone();
          const ProducedFloat8 pa =
              add_rmsnorm_forward_quantized(y, rstd, h, residual, weight, eps, q);
          model::add_rmsnorm_forward(y_op, rstd_op, h_op, residual, weight, eps);
          CHECK(same_bits(h, h_op));
          CHECK(same_bits(y, y_op));
          CHECK(same_bits(rstd, rstd_op));
          check_codes(pa, y, c, "add_rmsnorm_forward");

          // The norm's backward with the residual's gradient; dweight accumulates.
          const Tensor dy = random_gpu({rows, dim}, dt, 4), dres = random_gpu({rows, dim}, dt, 5);
          const Tensor dweight_start = testing::random_tensor({dim}, DType::F32, 6).to(kProducerGpu);
          Tensor dx = poisoned_on_gpu({rows, dim}, dt), dweight = dweight_start.clone();
          const ProducedFloat8 pb =
              rmsnorm_backward_add_quantized(dx, dweight, dy, h, weight, rstd, dres, q);
          Tensor dx_op = poisoned_on_gpu({rows, dim}, dt), dweight_op = dweight_start.clone();
          model::rmsnorm_backward_add(dx_op, dweight_op, dy, h, weight, rstd, dres);
          CHECK(same_bits(dx, dx_op));
          CHECK(same_bits(dweight, dweight_op));
          check_codes(pb, dx, c, "rmsnorm_backward_add");

          // SwiGLU and its backward, F = dim.
          const Tensor h13 = random_gpu({rows, 2 * dim}, dt, 7, 3.0);
          Tensor g = poisoned_on_gpu({rows, dim}, dt), g_op = poisoned_on_gpu({rows, dim}, dt);
          const ProducedFloat8 ps = swiglu_forward_quantized(g, h13, q);
          model::swiglu_forward(g_op, h13);
          CHECK(same_bits(g, g_op));
          check_codes(ps, g, c, "swiglu_forward");
          Tensor dh13 = poisoned_on_gpu({rows, 2 * dim}, dt), dh13_op = poisoned_on_gpu({rows, 2 * dim}, dt);
          const ProducedFloat8 pd = swiglu_backward_quantized(dh13, dy, h13, q);
          model::swiglu_backward(dh13_op, dy, h13);
          CHECK(same_bits(dh13, dh13_op));
          check_codes(pd, dh13, c, "swiglu_backward");

          if (c.reduced) CHECK(reduction.calls == 5);
        }
      }
    }
  }

  TEST_CASE("gpu: tensorwise codes of x and its transpose from one amax match the CPU") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (DType dt : {DType::F32, DType::BF16}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8192, 4096}, {257, 96}, {77, 130}}) {
        for (Format format : {Format::E4M3, Format::E5M2}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(rows);
          CAPTURE(cols);
          const Tensor x = random_gpu({rows, cols}, dt, 11, 5.0);
          const Tensor x_cpu = host_f32(x);
          // An amax above x's own (a reduced one): the codes must use it, not recompute it.
          Tensor amax = compute_amax(x, Granularity::Tensorwise);
          Tensor amax_cpu = to_host(amax);
          amax_cpu.data<float>()[0] *= 3.0f;
          amax.copy_from(amax_cpu.to(kProducerGpu));
          Float8Tensor t;
          const Float8Tensor q = quantize_tensorwise_from_amax(x, amax, format, false, &t);
          Float8Tensor t_cpu;
          const Float8Tensor q_cpu =
              quantize_tensorwise_from_amax(x_cpu, amax_cpu, format, false, &t_cpu);
          CHECK(bitwise_equal(to_host(q.scales), q_cpu.scales));
          CHECK(bitwise_equal(to_host(q.codes), q_cpu.codes));
          CHECK(bitwise_equal(to_host(t.scales), t_cpu.scales));
          CHECK(bitwise_equal(to_host(t.codes), t_cpu.codes));
          // Without the transpose, the flat cast: the same codes.
          const Float8Tensor alone = quantize_tensorwise_from_amax(x, amax, format, false);
          CHECK(bitwise_equal(to_host(alone.codes), q_cpu.codes));
        }
      }
    }
  }
}
