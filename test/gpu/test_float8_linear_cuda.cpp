// The FP8 linear's three GEMMs (fp8/float8_linear.h) on CUDA against the same Float8Gemms on
// the CPU, for every recipe: bf16 x, w, dy on the GPU as in training, bf16 y and dx, dw
// accumulated in f32; the CPU oracle runs on f32 copies of the same bf16 values. And FSDP's
// float8 all-gather codec (fp8/float8_all_gather.h) on CUDA: the same scale and e4m3 bytes as
// on the CPU, and the FP8 linear computing from the gathered codes.
//
// Quantization is bit-identical on both sides (test_fp8_cuda.cpp), so what differs is the
// GEMM alone: Hopper's FP8 accumulator (about 14 significant bits, promoted to fp32 every few
// k-steps, never under the output GEMM's fast accumulation) and, for y and dx, one rounding to
// bf16. Outputs are poisoned with NaN before the GPU writes them, and dw starts from random
// values of the update's size, so an unwritten element or an assignment instead of += fails.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "fp8/float8_all_gather.h"
#include "fp8/float8_linear.h"
#include "fp8/recipe.h"
#include "fp8/scaled_gemm.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using titan::testing::bf16_values;
using titan::testing::random_tensor;
using titan::testing::relative_l2_error;

namespace {

const Device kLinearGpu = Device::cuda(0);

// T, in, out: multiples of 16 (cuBLASLt FP8) with partial 128-blocks along every contraction
// axis but the output GEMM's — in = 384 (output), out = 528 (grad_input), T = 272 (grad_weight)
// — and partial 128x128 weight tiles.
constexpr int64_t kTokens = 272, kIn = 384, kOut = 528;

// y and dx in bf16: the FP8 GEMM's own error (measured on H100 for these recipe GEMMs: 1e-4
// promoted, 2.3e-4 – 4.6e-4 with fast accumulation at K 384 – 1024) plus one rounding of each
// output to 8 significant bits, at most 2⁻⁹ relative per element and about 1.7e-3 in L2 as
// measured. 1e-2 bounds the sum with room and still catches a wrong scale, layout or operand
// (an O(1) error).
constexpr double kBf16OutTolerance = 1e-2;
// dw in f32: the promoted accumulator's 1e-4 (measured 0.9e-4 – 1.1e-4 for every scale mode);
// rowwise_with_gw_hp's bf16 GEMM differs from OpenBLAS by summation order only (~1e-7).
constexpr double kF32OutTolerance = 5e-4;

Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, kLinearGpu);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

// A tensor in bf16 on the GPU and the f32 values it holds on the host.
struct Operand {
  Tensor gpu, cpu;
};
Operand operand(const Shape& shape, uint64_t seed, double scale) {
  Tensor values = bf16_values(random_tensor(shape, DType::F32, seed, scale));
  return {cast(values, DType::BF16).to(kLinearGpu), values};
}

// Stands in for the all-reduce (max) over tp, where another rank holds a value 4x larger than
// this one's: the scale must come from the reduced amax on both devices. Records the devices
// of the amaxes it sees.
struct FakeTpReduction final : fp8::AmaxReduction {
  std::vector<Device> seen;
  void reduce_max(const Tensor& amax) override {
    seen.push_back(amax.device());
    Tensor host = amax.to(Device::cpu());
    host.data<float>()[0] *= 4.0f;
    amax.copy_from(host.to(amax.device()));
  }
};

struct RecipeCase {
  const char* recipe;
  bool tp_reduction;  // tensorwise amaxes go through FakeTpReduction
};

const RecipeCase kCases[] = {{"tensorwise", false},
                             {"tensorwise", true},
                             {"rowwise", false},
                             {"rowwise_with_gw_hp", false},
                             {"blockwise", false}};

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: the FP8 linear's GEMMs on bf16 CUDA tensors match the CPU for every recipe") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Operand x = operand({kTokens, kIn}, 51, 1.0);
    const Operand w = operand({kOut, kIn}, 52, 0.05);
    const Operand dy = operand({kTokens, kOut}, 53, 1e-3);
    // dyᵀ·x has elements of about 1e-3 · 0.58 · √272 ≈ 1e-2; the initial dw is of that size,
    // so the comparison sees the update, not only the starting values.
    const Tensor dw_initial = random_tensor({kOut, kIn}, DType::F32, 54, 1e-2);

    for (const RecipeCase& c : kCases) {
      const std::string recipe = c.recipe;
      CAPTURE(recipe);
      CAPTURE(c.tp_reduction);
      auto reduction = std::make_shared<FakeTpReduction>();
      fp8::Float8Gemms gemms(fp8::make_recipe(fp8::kRecipeNames.parse(recipe, "recipe")),
                             c.tp_reduction ? reduction : nullptr);

      Tensor y_expected = Tensor::empty({kTokens, kOut}, DType::F32);
      Tensor dx_expected = Tensor::empty({kTokens, kIn}, DType::F32);
      Tensor dw_expected = dw_initial.clone();
      gemms.output(y_expected, x.cpu, w.cpu);
      gemms.grad_input(dx_expected, dy.cpu, w.cpu);
      gemms.grad_weight(dw_expected, dy.cpu, x.cpu);
      const size_t cpu_reductions = reduction->seen.size();

      Tensor y = poisoned({kTokens, kOut}, DType::BF16);
      Tensor dx = poisoned({kTokens, kIn}, DType::BF16);
      Tensor dw = dw_initial.to(kLinearGpu);
      gemms.output(y, x.gpu, w.gpu);
      gemms.grad_input(dx, dy.gpu, w.gpu);
      gemms.grad_weight(dw, dy.gpu, x.gpu);

      const double y_error = relative_l2_error(y, y_expected);
      const double dx_error = relative_l2_error(dx, dx_expected);
      const double dw_error = relative_l2_error(dw, dw_expected);
      // doctest prints a `const char*` argument as a pointer: pass strings.
      MESSAGE(recipe, std::string(c.tp_reduction ? " (tp-reduced amax)" : ""),
              ": relative L2 error y ", y_error, ", dx ", dx_error, ", dw ", dw_error);
      CHECK_MESSAGE(y_error <= kBf16OutTolerance, "y: relative L2 error ", y_error);
      CHECK_MESSAGE(dx_error <= kBf16OutTolerance, "dx: relative L2 error ", dx_error);
      CHECK_MESSAGE(dw_error <= kF32OutTolerance, "dw: relative L2 error ", dw_error);

      if (c.tp_reduction) {
        // x, w (output); dy, w (grad_input); dy, x (grad_weight): six tensorwise amaxes per
        // device, the GPU's on the GPU.
        CHECK(cpu_reductions == 6);
        REQUIRE(reduction->seen.size() == 12);
        for (size_t i = 0; i < 6; ++i) CHECK(reduction->seen[i] == Device::cpu());
        for (size_t i = 6; i < 12; ++i) CHECK(reduction->seen[i] == kLinearGpu);
      }
    }
  }

  TEST_CASE(
      "gpu: FSDP's float8 all-gather codec on CUDA gives the CPU's bytes and feeds the FP8 "
      "linear") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // A weight [out, in] in FSDP's two shards of R rows; the second shard has 4 zero-padded
    // rows (out = 2R − 4). Each rank's codec sees the other shard's amax through its shard
    // group's reduction, stood in for here by the other shard's amax itself.
    constexpr int64_t R = 26, out = 2 * R - 4, in = 64, T = 32;
    const Tensor w = random_tensor({out, in}, DType::F32, 71, 0.05);
    Tensor shards[2] = {Tensor::zeros({R, in}, DType::F32), Tensor::zeros({R, in}, DType::F32)};
    shards[0].copy_from(w.narrow(0, 0, R));
    shards[1].narrow(0, 0, out - R).copy_from(w.narrow(0, R, out - R));
    struct OtherShard final : fp8::AmaxReduction {
      Tensor other;  // f32 [1] on the host
      void reduce_max(const Tensor& amax) override {
        Tensor host = amax.to(Device::cpu());
        host.data<float>()[0] = std::max(host.data<float>()[0], other.data<float>()[0]);
        amax.copy_from(host.to(amax.device()));
      }
    };
    model::Parameter param;
    param.name = "layers.0.attention.wqkv.weight";
    param.shape = {out, in};

    // On each device: both ranks' codecs, their encoded shards gathered, decoded by rank 0.
    struct Gathered {
      Tensor codes;  // [2R, in] e4m3, on the host
      Tensor value;  // rank 0's decoded weight [out, in]
      std::shared_ptr<fp8::Float8WeightCache> cache;
      std::shared_ptr<fp8::Float8AllGatherCodec> codec;
    };
    auto gather = [&](const Device& device, DType compute_dtype) {
      Gathered g;
      g.cache = std::make_shared<fp8::Float8WeightCache>();
      Tensor all = Tensor::empty({2 * R * in}, DType::E4M3, device);
      for (int rank = 0; rank < 2; ++rank) {
        auto reduction = std::make_shared<OtherShard>();
        reduction->other =
            fp8::compute_amax(shards[1 - rank].view({1, R * in}), fp8::Granularity::Tensorwise);
        auto codec = std::make_shared<fp8::Float8AllGatherCodec>(
            reduction, rank == 0 ? g.cache : std::make_shared<fp8::Float8WeightCache>());
        const Tensor shard = shards[rank].to(device);
        codec->update({{&param, shard}});
        codec->encode(param, shard, all.narrow(0, rank * R * in, R * in));
        if (rank == 0) g.codec = codec;
      }
      g.codes = all.to(Device::cpu()).view({2 * R, in});
      g.value = g.codec->decode(param, all.narrow(0, 0, out * in).view({out, in}), compute_dtype);
      return g;
    };
    const Gathered cpu = gather(Device::cpu(), DType::F32);
    const Gathered gpu = gather(kLinearGpu, DType::BF16);

    // The same scale and the same bytes: what quantizing the whole weight gives.
    const fp8::Float8Tensor whole =
        fp8::quantize(w, fp8::Granularity::Tensorwise, fp8::Format::E4M3);
    CHECK(gpu.codec->scale(param).to(Device::cpu()).data<float>()[0] ==
          whole.scales.data<float>()[0]);
    CHECK(std::memcmp(gpu.codes.raw_data(), cpu.codes.raw_data(), gpu.codes.nbytes()) == 0);
    CHECK(std::memcmp(cpu.codes.raw_data(), whole.codes.raw_data(), whole.codes.nbytes()) == 0);
    CHECK(gpu.value.dtype() == DType::BF16);
    CHECK(gpu.value.device() == kLinearGpu);
    CHECK(relative_l2_error(gpu.value, fp8::dequantize(whole)) <= 4e-3);  // one bf16 rounding

    // The FP8 linear on CUDA computes from the gathered codes (the values are never quantized
    // again) and gives the CPU's output GEMM.
    const Operand x = operand({T, in}, 72, 1.0);
    fp8::Float8Gemms cpu_gemms(fp8::make_recipe(fp8::RecipeKind::Tensorwise), nullptr, nullptr,
                               cpu.cache);
    fp8::Float8Gemms gpu_gemms(fp8::make_recipe(fp8::RecipeKind::Tensorwise), nullptr, nullptr,
                               gpu.cache);
    Tensor y_expected = Tensor::empty({T, out}, DType::F32);
    cpu_gemms.output(y_expected, x.cpu, cpu.value);
    Tensor y = poisoned({T, out}, DType::BF16);
    gpu_gemms.output(y, x.gpu, gpu.value);
    const double y_error = relative_l2_error(y, y_expected);
    MESSAGE("float8 all-gather on CUDA: output GEMM relative L2 error ", y_error);
    CHECK(y_error <= kBf16OutTolerance);
    const Tensor dy = bf16_values(y_expected);  // a gradient of y's size, the same on both
    Tensor dx_expected = Tensor::empty({T, in}, DType::F32);
    cpu_gemms.grad_input(dx_expected, dy, cpu.value);
    Tensor dx = poisoned({T, in}, DType::BF16);
    gpu_gemms.grad_input(dx, cast(dy, DType::BF16).to(kLinearGpu), gpu.value);
    CHECK(relative_l2_error(dx, dx_expected) <= kBf16OutTolerance);

    // FSDP frees the gathered weight: the codes go with it.
    gpu.codec->release(param, gpu.value);
    CHECK(gpu.cache->find(gpu.value) == nullptr);
  }
}  // TEST_SUITE
