// GPU parity of initialisation: a parameter drawn by the device kernel (model/ops/init_values.h)
// has the CPU's bits, for any shard, in f32 and in bf16. Bit for bit is the contract, not a
// tolerance: core/philox.h's transform is built from correctly rounded operations only, so any
// difference is a contraction or an operation out of order, and fails.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/tensor.h"
#include "model/ops/init_values.h"
#include "model/parameter.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace {

const Device kInitGpu = Device::cuda(0);

Tensor poisoned_init(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, kInitGpu);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

// A fused weight of three parts with each kind of initialisation, the truncated one cut at
// ±0.7σ (48% of its draws rejected, so the kernel's loop runs many rounds), 10 columns wide.
Parameter fused_weight() {
  return declare_fused_parameter(
      "layers.1.attention.wqkv.weight",
      {{"layers.1.attention.wq.weight", 40, InitSpec::normal(0.5)},
       {"layers.1.attention.wk.weight", 24, InitSpec::truncated_normal(2.0, 1.4)},
       {"layers.1.attention.wv.weight", 16, InitSpec::ones()}},
      10, DType::F32);
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE(
      "gpu: a parameter drawn on the device has the CPU's bits for any shard in f32 and bf16") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (DType dtype : {DType::F32, DType::BF16}) {
      // Row slices (tp 4 of the rows, every part split), column slices (tp 2 of 10 columns),
      // and odd FSDP shards of each: 7 rows from row 3 of the slice crosses a part boundary.
      for (ParamSlice slice : {ParamSlice{}, ParamSlice{0, 3, 4}, ParamSlice{1, 1, 2}}) {
        Parameter p = fused_weight();
        p.slice = slice;
        const Shape local = p.local_shape();
        for (auto [begin, rows] :
             {std::pair<int64_t, int64_t>{0, local[0]}, {3, 7}, {local[0] - 5, 5}}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(slice.dim);
          CAPTURE(begin);
          Tensor cpu = Tensor::empty({rows, local[1]}, dtype);
          init_local_rows(cpu, p, begin, 11);
          Tensor gpu = poisoned_init({rows, local[1]}, dtype);
          init_local_rows(gpu, p, begin, 11);
          CHECK(testing::bitwise_equal(gpu.to(Device::cpu()), cpu));
        }
      }
    }
  }

  TEST_CASE("gpu: the device draws a million values of each kind with the CPU's bits") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // A [977, 1031] block from row 5 and column 3 of a [*, 1100] weight: odd sizes everywhere,
    // past the grid's first stride, and the model's own truncation (±3σ of the output layer).
    const InitBlock block{1100, 1031, 5, 3};
    for (InitSpec init : {InitSpec::normal(0.02), InitSpec::truncated_normal(0.0625, 0.1875)}) {
      const CounterRng rng(0, "output.weight");
      Tensor cpu = Tensor::empty({977, 1031}, DType::F32);
      init_values(cpu, init, rng, block);
      Tensor gpu = poisoned_init({977, 1031}, DType::F32);
      init_values(gpu, init, rng, block);
      CHECK(testing::bitwise_equal(gpu.to(Device::cpu()), cpu));
    }
    // The draw's rate, for the start-up of a large model: 2^28 values (1 GiB of f32), the
    // model's usual truncated normal, timed to the first element's copy back (the stream's end).
    Tensor big = Tensor::empty({int64_t{1} << 14, int64_t{1} << 14}, DType::F32, kInitGpu);
    const InitSpec init = InitSpec::truncated_normal(0.02, 2.0);
    init_values(big.rows(0, 1), init, CounterRng(0, "warm-up"), {1 << 14, 1 << 14, 0, 0});
    (void)big.narrow(0, 0, 1).to(Device::cpu());
    const auto start = std::chrono::steady_clock::now();
    init_values(big, init, CounterRng(0, "layers.0.feed_forward.w1.weight"),
                {1 << 14, 1 << 14, 0, 0});
    const Tensor first = big.narrow(0, 0, 1).narrow(1, 0, 1).to(Device::cpu());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    CHECK(std::isfinite(first.data<float>()[0]));
    MESSAGE("2^28 values drawn on the device in " << ms << " ms");
  }
}  // TEST_SUITE
