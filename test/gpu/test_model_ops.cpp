// GPU parity: every CUDA op of model/ops (attention aside: test_attention.cpp) against its CPU
// twin on the same inputs.
//
// Two variants per op: f32 on the GPU, and bf16 activations on the GPU against the CPU twin run
// in f32 on the same bf16-rounded values (so the only difference left is the GPU rounding its
// outputs to bf16). Outputs are poisoned_tensor with NaN before the GPU runs, so an element a
// kernel forgets to write fails the check; accumulated gradients start from random nonzero values,
// so a kernel that assigns instead of adding fails too. Row counts of 257 and odd widths exercise
// the tails; views that start off a 16-byte boundary exercise the scalar paths.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "core/tensor.h"
#include "model/ops/adamw.h"
#include "model/ops/cross_entropy.h"
#include "model/ops/embedding.h"
#include "model/ops/newton_schulz.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/ops/swiglu.h"
#include "model/ops/tensor_math.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace {

const Device kOpsGpu = Device::cuda(0);

// f32 on both sides: the kernels differ from the CPU twins only in summation order, FMA
// contraction and expf's last ulp, all around 1e-7 relative.
constexpr double kF32Tolerance = 1e-5;
// bf16 outputs against f32 on the same values: rounding an output to bf16 costs at most 2^-9
// relative (about 1e-3 RMS), so 1e-2 leaves margin while a wrong formula is still far above it.
constexpr double kBf16Tolerance = 1e-2;
// AdamW does the CPU's operations in the CPU's order with no FMA contraction (identical bits on
// an H100); the bound states the contract, not the implementation.
constexpr double kAdamWTolerance = 1e-6;
// The gradient-norm reduction: double accumulation on both sides, in different orders (~1e-13).
constexpr double kSumOfSquaresTolerance = 1e-6;

struct Variant {
  DType dtype;       // of the activations on the GPU
  double tolerance;  // for outputs stored in that dtype
  const char* name;
};
const Variant kVariants[] = {{DType::F32, kF32Tolerance, "f32"},
                             {DType::BF16, kBf16Tolerance, "bf16"}};

// The values a `dtype` copy of f32 `t` holds, as an f32 CPU tensor for the CPU twin.
Tensor as_stored(const Tensor& t, DType dtype) {
  return dtype == DType::F32 ? t.clone() : testing::bf16_values(t);
}

Tensor random_as(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  return as_stored(testing::random_tensor(shape, DType::F32, seed, scale), dtype);
}

// A CUDA copy of the f32 CPU tensor `t`, stored as `dtype`.
Tensor to_gpu(const Tensor& t, DType dtype) { return cast(t, dtype).to(kOpsGpu); }

// A CUDA tensor full of NaN: anything a kernel leaves unwritten fails the comparison.
Tensor poisoned_tensor(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, kOpsGpu);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

void check_close(const Tensor& gpu, const Tensor& cpu, double tolerance, const std::string& what) {
  const double error = testing::relative_l2_error(gpu, cpu);
  INFO(what, ": relative L2 error ", error, " (tolerance ", tolerance, ")");
  CHECK(error <= tolerance);
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: rmsnorm forward and backward match the CPU op") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t rows = 257;
    const double eps = 1e-5;
    for (const Variant& variant : kVariants) {
      for (int64_t dim : {4096, 96, 77}) {
        CAPTURE(variant.name);
        CAPTURE(dim);
        const DType dt = variant.dtype;
        Tensor x = random_as({rows, dim}, dt, 1, 2.0), weight = random_as({dim}, dt, 2);
        Tensor dy = random_as({rows, dim}, dt, 3);
        Tensor dweight_start = testing::random_tensor({dim}, DType::F32, 4);

        Tensor y = Tensor::empty({rows, dim}, DType::F32), rstd = Tensor::empty({rows}, DType::F32);
        rmsnorm_forward(y, rstd, x, weight, eps);
        Tensor dx = Tensor::empty({rows, dim}, DType::F32), dweight = dweight_start.clone();
        rmsnorm_backward(dx, dweight, dy, x, weight, rstd);

        Tensor x_gpu = to_gpu(x, dt), weight_gpu = to_gpu(weight, dt), dy_gpu = to_gpu(dy, dt);
        Tensor y_gpu = poisoned_tensor({rows, dim}, dt),
               rstd_gpu = poisoned_tensor({rows}, DType::F32);
        rmsnorm_forward(y_gpu, rstd_gpu, x_gpu, weight_gpu, eps);
        check_close(y_gpu, y, variant.tolerance, "y");
        // rstd is f32 in both variants, computed from the same values.
        check_close(rstd_gpu, rstd, kF32Tolerance, "rstd");

        // Backward from the CPU's rstd, so that it is checked on its own.
        Tensor dx_gpu = poisoned_tensor({rows, dim}, dt), dweight_gpu = dweight_start.to(kOpsGpu);
        rmsnorm_backward(dx_gpu, dweight_gpu, dy_gpu, x_gpu, weight_gpu, rstd.to(kOpsGpu));
        check_close(dx_gpu, dx, variant.tolerance, "dx");
        // dweight is f32 in both variants: the same products, summed in another order.
        check_close(dweight_gpu, dweight, kF32Tolerance, "dweight");
      }
    }
  }

  namespace {

  // The residual adds fused into RMSNorm's row kernels: against the CPU twin (the composition)
  // within the op's tolerance, and bit for bit against the two kernels they replace.
  void check_add_rmsnorm(const Variant& variant, int64_t dim) {
    CAPTURE(variant.name);
    CAPTURE(dim);
    const int64_t rows = 257;
    const double eps = 1e-5;
    const DType dt = variant.dtype;
    Tensor h = random_as({rows, dim}, dt, 31, 2.0), residual = random_as({rows, dim}, dt, 32);
    Tensor weight = random_as({dim}, dt, 33), dy = random_as({rows, dim}, dt, 34);
    Tensor dresidual = random_as({rows, dim}, dt, 35);
    Tensor dweight_start = testing::random_tensor({dim}, DType::F32, 36);

    // The CPU twin, on the values the GPU holds. A bf16 GPU stores the sum rounded and
    // normalises that: the CPU's norm of the same rounded sum is its reference.
    Tensor h_cpu = h.clone(), y = Tensor::empty({rows, dim}, DType::F32);
    Tensor rstd = Tensor::empty({rows}, DType::F32);
    add_rmsnorm_forward(y, rstd, h_cpu, residual, weight, eps);
    const Tensor h_stored = as_stored(h_cpu, dt);
    if (dt != DType::F32) rmsnorm_forward(y, rstd, h_stored, weight, eps);
    Tensor dx = Tensor::empty({rows, dim}, DType::F32), dweight = dweight_start.clone();
    rmsnorm_backward_add(dx, dweight, dy, h_stored, weight, rstd, dresidual);

    Tensor residual_gpu = to_gpu(residual, dt), weight_gpu = to_gpu(weight, dt);
    Tensor h_gpu = to_gpu(h, dt), y_gpu = poisoned_tensor({rows, dim}, dt);
    Tensor rstd_gpu = poisoned_tensor({rows}, DType::F32);
    add_rmsnorm_forward(y_gpu, rstd_gpu, h_gpu, residual_gpu, weight_gpu, eps);
    check_close(h_gpu, h_stored, variant.tolerance, "h");
    check_close(y_gpu, y, variant.tolerance, "y");
    check_close(rstd_gpu, rstd, kF32Tolerance, "rstd");

    // The unfused kernels on the same device tensors give the same bits.
    Tensor h_two = to_gpu(h, dt), y_two = poisoned_tensor({rows, dim}, dt);
    Tensor rstd_two = poisoned_tensor({rows}, DType::F32);
    accumulate(h_two, residual_gpu);
    rmsnorm_forward(y_two, rstd_two, h_two, weight_gpu, eps);
    CHECK(testing::bitwise_equal(h_gpu.to(Device::cpu()), h_two.to(Device::cpu())));
    CHECK(testing::bitwise_equal(y_gpu.to(Device::cpu()), y_two.to(Device::cpu())));
    CHECK(testing::bitwise_equal(rstd_gpu.to(Device::cpu()), rstd_two.to(Device::cpu())));

    // Backward from the CPU's h and rstd, so that it is checked on its own.
    Tensor h_in = to_gpu(h_stored, dt), rstd_in = rstd.to(kOpsGpu), dy_gpu = to_gpu(dy, dt);
    Tensor dresidual_gpu = to_gpu(dresidual, dt);
    Tensor dx_gpu = poisoned_tensor({rows, dim}, dt), dweight_gpu = dweight_start.to(kOpsGpu);
    rmsnorm_backward_add(dx_gpu, dweight_gpu, dy_gpu, h_in, weight_gpu, rstd_in, dresidual_gpu);
    check_close(dx_gpu, dx, variant.tolerance, "dx");
    check_close(dweight_gpu, dweight, kF32Tolerance, "dweight");

    Tensor dx_two = poisoned_tensor({rows, dim}, dt), dweight_two = dweight_start.to(kOpsGpu);
    rmsnorm_backward(dx_two, dweight_two, dy_gpu, h_in, weight_gpu, rstd_in);
    accumulate(dx_two, dresidual_gpu);
    CHECK(testing::bitwise_equal(dx_gpu.to(Device::cpu()), dx_two.to(Device::cpu())));
    CHECK(testing::bitwise_equal(dweight_gpu.to(Device::cpu()), dweight_two.to(Device::cpu())));
  }

  }  // namespace

  TEST_CASE(
      "gpu: add_rmsnorm_forward and rmsnorm_backward_add match the CPU and the unfused kernels") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const Variant& variant : kVariants) {
      for (int64_t dim : {4096, 96, 77}) check_add_rmsnorm(variant, dim);
    }
  }

  TEST_CASE("gpu: rope forward and backward match the CPU op") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t batch = 2, seq_len = 129, positions = 200;  // 258 rows, position t % 129
    for (const Variant& variant : kVariants) {
      for (int64_t head_dim : {128, 64}) {
        CAPTURE(variant.name);
        CAPTURE(head_dim);
        const DType dt = variant.dtype;
        const int64_t rotated = 6, width = (rotated + 2) * head_dim;  // q and k heads, then v
        Tensor cos = Tensor::empty({positions, head_dim / 2}, DType::F32);
        Tensor sin = Tensor::empty({positions, head_dim / 2}, DType::F32);
        rope_tables(cos, sin, head_dim, 500000.0, RopeScaling{});
        Tensor cos_gpu = cos.to(kOpsGpu), sin_gpu = sin.to(kOpsGpu);
        Tensor x = random_as({batch * seq_len, width}, dt, 5);

        Tensor forward = x.clone(), backward = x.clone();
        rope_forward(forward, cos, sin, seq_len, rotated, head_dim);
        rope_backward(backward, cos, sin, seq_len, rotated, head_dim);

        // In place: an element the kernel skips keeps its input value and fails the comparison.
        Tensor forward_gpu = to_gpu(x, dt), backward_gpu = to_gpu(x, dt);
        rope_forward(forward_gpu, cos_gpu, sin_gpu, seq_len, rotated, head_dim);
        rope_backward(backward_gpu, cos_gpu, sin_gpu, seq_len, rotated, head_dim);
        check_close(forward_gpu, forward, variant.tolerance, "rope forward");
        check_close(backward_gpu, backward, variant.tolerance, "rope backward");
      }
    }
  }

  TEST_CASE("gpu: swiglu forward and backward match the CPU op") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t rows = 257;
    for (const Variant& variant : kVariants) {
      for (int64_t ffn : {1792, 77}) {
        CAPTURE(variant.name);
        CAPTURE(ffn);
        const DType dt = variant.dtype;
        Tensor h13 = random_as({rows, 2 * ffn}, dt, 6, 4.0), dout = random_as({rows, ffn}, dt, 7);

        Tensor out = Tensor::empty({rows, ffn}, DType::F32);
        Tensor dh13 = Tensor::empty({rows, 2 * ffn}, DType::F32);
        swiglu_forward(out, h13);
        swiglu_backward(dh13, dout, h13);

        Tensor h13_gpu = to_gpu(h13, dt);
        Tensor out_gpu = poisoned_tensor({rows, ffn}, dt),
               dh13_gpu = poisoned_tensor({rows, 2 * ffn}, dt);
        swiglu_forward(out_gpu, h13_gpu);
        swiglu_backward(dh13_gpu, to_gpu(dout, dt), h13_gpu);
        check_close(out_gpu, out, variant.tolerance, "swiglu out");
        check_close(dh13_gpu, dh13, variant.tolerance, "swiglu dh13");
      }
    }
  }

  namespace {

  // The three cross-entropy phases on the GPU against the CPU, each phase fed the CPU's results
  // of the previous ones so that each kernel is checked on its own; phase 3 out of place (output
  // poisoned_tensor) and in place (dlogits = logits).
  void check_cross_entropy(const Variant& variant, int64_t vocab_local, int64_t vocab_start,
                           const Tensor& targets, uint64_t seed) {
    const DType dt = variant.dtype;
    const int64_t rows = targets.numel();
    const double grad_scale = 1.0 / (4.0 * static_cast<double>(rows));
    Tensor logits = random_as({rows, vocab_local}, dt, seed, 4.0);

    auto row = [&] { return Tensor::empty({rows}, DType::F32); };
    Tensor row_max = row(), sum_exp = row(), target_logit = row(), losses = row();
    Tensor dlogits = Tensor::empty({rows, vocab_local}, DType::F32);
    cross_entropy_row_max(row_max, logits);
    cross_entropy_row_sums(sum_exp, target_logit, logits, targets, row_max, vocab_start);
    cross_entropy_loss_and_grad(losses, dlogits, logits, targets, row_max, sum_exp, target_logit,
                                vocab_start, grad_scale);

    // The row statistics and losses are f32 in both variants, computed from the same values.
    Tensor logits_gpu = to_gpu(logits, dt), targets_gpu = targets.to(kOpsGpu);
    Tensor row_max_gpu = poisoned_tensor({rows}, DType::F32);
    cross_entropy_row_max(row_max_gpu, logits_gpu);
    check_close(row_max_gpu, row_max, kF32Tolerance, "row_max");

    Tensor sum_exp_gpu = poisoned_tensor({rows}, DType::F32),
           target_logit_gpu = poisoned_tensor({rows}, DType::F32);
    cross_entropy_row_sums(sum_exp_gpu, target_logit_gpu, logits_gpu, targets_gpu,
                           row_max.to(kOpsGpu), vocab_start);
    check_close(sum_exp_gpu, sum_exp, kF32Tolerance, "sum_exp");
    check_close(target_logit_gpu, target_logit, kF32Tolerance, "target_logit");

    Tensor losses_gpu = poisoned_tensor({rows}, DType::F32),
           dlogits_gpu = poisoned_tensor({rows, vocab_local}, dt);
    cross_entropy_loss_and_grad(losses_gpu, dlogits_gpu, logits_gpu, targets_gpu,
                                row_max.to(kOpsGpu), sum_exp.to(kOpsGpu), target_logit.to(kOpsGpu),
                                vocab_start, grad_scale);
    check_close(losses_gpu, losses, kF32Tolerance, "losses");
    check_close(dlogits_gpu, dlogits, variant.tolerance, "dlogits");

    Tensor in_place = logits_gpu.clone();
    cross_entropy_loss_and_grad(losses_gpu, in_place, in_place, targets_gpu, row_max.to(kOpsGpu),
                                sum_exp.to(kOpsGpu), target_logit.to(kOpsGpu), vocab_start,
                                grad_scale);
    check_close(in_place, dlogits, variant.tolerance, "dlogits in place");
  }

  }  // namespace

  TEST_CASE("gpu: cross-entropy phases match the CPU op on whole and sharded vocabularies") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t rows = 257;
    struct Shard {
      int64_t vocab_local, vocab_start, vocab;
    };
    // The whole 32000 vocab; shard 1 of 2 of an odd vocab (scalar path); shard 3 of Llama 3's
    // 128256 over 8 ranks (16-byte path).
    const Shard shards[] = {{32000, 0, 32000}, {32011, 32011, 64022}, {16032, 48096, 128256}};
    for (const Variant& variant : kVariants) {
      for (const Shard& shard : shards) {
        CAPTURE(variant.name);
        CAPTURE(shard.vocab_local);
        CAPTURE(shard.vocab_start);
        // Even rows target this shard, odd rows anywhere in the vocabulary (mostly other shards).
        Tensor targets = testing::random_tokens(1, rows, shard.vocab, 11).view({rows});
        int32_t* ids = targets.data<int32_t>();
        for (int64_t t = 0; t < rows; t += 2) {
          ids[t] = static_cast<int32_t>(shard.vocab_start + ids[t] % shard.vocab_local);
        }
        check_cross_entropy(variant, shard.vocab_local, shard.vocab_start, targets, 12);

        // No target in this shard: dlogits is the softmax alone, which the one-hot entries
        // would otherwise dominate in the L2 norm.
        if (shard.vocab_local == shard.vocab) continue;
        Tensor elsewhere = Tensor::empty({rows}, DType::I32);
        for (int64_t t = 0; t < rows; ++t) {
          elsewhere.data<int32_t>()[t] =
              static_cast<int32_t>((shard.vocab_start + shard.vocab_local + t) % shard.vocab);
        }
        check_cross_entropy(variant, shard.vocab_local, shard.vocab_start, elsewhere, 13);
      }
    }
  }

  TEST_CASE("gpu: embedding forward and backward match the CPU op on a vocab shard") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const int64_t rows = 257, vocab = 2000, vocab_local = 1000, vocab_start = 500;
    // Every 4th token is 777 (this shard, repeated: its adds race), every 4th + 1 is 123 (another
    // shard's, repeated), the rest anywhere.
    Tensor tokens = testing::random_tokens(1, rows, vocab, 21).view({rows});
    for (int64_t t = 0; t < rows; ++t) {
      if (t % 4 == 0) tokens.data<int32_t>()[t] = 777;
      if (t % 4 == 1) tokens.data<int32_t>()[t] = 123;
    }
    Tensor tokens_gpu = tokens.to(kOpsGpu);
    for (const Variant& variant : kVariants) {
      for (int64_t dim : {4096, 96, 77}) {
        CAPTURE(variant.name);
        CAPTURE(dim);
        const DType dt = variant.dtype;
        Tensor weight = random_as({vocab_local, dim}, dt, 22),
               dout = random_as({rows, dim}, dt, 23);
        Tensor dweight_start = testing::random_tensor({vocab_local, dim}, DType::F32, 24);

        Tensor out = Tensor::empty({rows, dim}, DType::F32), dweight = dweight_start.clone();
        embedding_forward(out, weight, tokens, vocab_start);
        embedding_backward(dweight, dout, tokens, vocab_start);

        Tensor out_gpu = poisoned_tensor({rows, dim}, dt), dweight_gpu = dweight_start.to(kOpsGpu);
        embedding_forward(out_gpu, to_gpu(weight, dt), tokens_gpu, vocab_start);
        embedding_backward(dweight_gpu, to_gpu(dout, dt), tokens_gpu, vocab_start);
        // A copy: exact in either dtype.
        check_close(out_gpu, out, kF32Tolerance, "embedding out");
        // dweight is f32 in both variants: the same values, added in another order.
        check_close(dweight_gpu, dweight, kF32Tolerance, "embedding dweight");
      }
    }

    // A bf16 gradient is refused with the reason.
    Tensor dweight_bf16 = Tensor::zeros({vocab_local, 96}, DType::BF16, kOpsGpu);
    std::string message;
    try {
      embedding_backward(dweight_bf16, to_gpu(random_as({rows, 96}, DType::F32, 25), DType::BF16),
                         tokens_gpu, vocab_start);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK(message.find("must be f32") != std::string::npos);
  }

  TEST_CASE("gpu: adamw step matches the CPU op and writes the bf16 working copy") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // [257, 4096] takes the float4 path; a 1001-element view one element into its buffer the
    // scalar one.
    struct Case {
      Shape buffer;
      int64_t offset;
    };
    const Case cases[] = {{{257, 4096}, 0}, {{1002}, 1}};
    for (const Case& c : cases) {
      CAPTURE(c.buffer);
      const int64_t n = c.buffer.numel() - c.offset;
      // Flat views of whole buffers, starting `offset` elements in.
      auto flat = [&](const Tensor& buffer) {
        return buffer.view({c.buffer.numel()}).narrow(0, c.offset, n);
      };
      Tensor param = testing::random_tensor(c.buffer, DType::F32, 31);
      Tensor exp_avg = testing::random_tensor(c.buffer, DType::F32, 32, 0.1);
      Tensor exp_avg_sq = testing::random_tensor(c.buffer, DType::F32, 33, 0.1);
      for (int64_t i = 0; i < exp_avg_sq.numel(); ++i) {
        float& v = exp_avg_sq.data<float>()[i];
        v = v * v;  // a second moment is not negative
      }
      Tensor grad = testing::random_tensor(c.buffer, DType::F32, 34);
      Tensor param_gpu = param.to(kOpsGpu), exp_avg_gpu = exp_avg.to(kOpsGpu);
      Tensor exp_avg_sq_gpu = exp_avg_sq.to(kOpsGpu), grad_gpu = grad.to(kOpsGpu);
      Tensor working = Tensor::empty(c.buffer, DType::BF16);
      Tensor working_gpu = poisoned_tensor(c.buffer, DType::BF16);

      AdamWHyper hyper{3e-4, 0.9, 0.95, 1e-8, 0.1, 7};
      adamw_step(flat(param), flat(exp_avg), flat(exp_avg_sq), flat(grad), hyper, flat(working));
      adamw_step(flat(param_gpu), flat(exp_avg_gpu), flat(exp_avg_sq_gpu), flat(grad_gpu), hyper,
                 flat(working_gpu));
      // The working copy is the step's param rounded to nearest even (the CPU's core/bf16.h).
      CHECK(testing::bitwise_equal(flat(working_gpu).to(Device::cpu()),
                                   cast(flat(param_gpu).to(Device::cpu()), DType::BF16)));
      // The next step without a working copy (the default argument).
      hyper.step = 8;
      adamw_step(flat(param), flat(exp_avg), flat(exp_avg_sq), flat(grad), hyper);
      adamw_step(flat(param_gpu), flat(exp_avg_gpu), flat(exp_avg_sq_gpu), flat(grad_gpu), hyper);

      check_close(flat(param_gpu), flat(param), kAdamWTolerance, "param");
      check_close(flat(exp_avg_gpu), flat(exp_avg), kAdamWTolerance, "exp_avg");
      check_close(flat(exp_avg_sq_gpu), flat(exp_avg_sq), kAdamWTolerance, "exp_avg_sq");
      check_close(flat(working_gpu), flat(working), kAdamWTolerance, "bf16 working copy");
    }
  }

  TEST_CASE("gpu: adamw step with bf16 moments matches the CPU op bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Shape shape{257, 1001};
    Tensor param = testing::random_tensor(shape, DType::F32, 41);
    Tensor exp_avg = cast(testing::random_tensor(shape, DType::F32, 42, 0.1), DType::BF16);
    Tensor sq = testing::random_tensor(shape, DType::F32, 43, 0.1);
    for (int64_t i = 0; i < sq.numel(); ++i) sq.data<float>()[i] *= sq.data<float>()[i];
    Tensor exp_avg_sq = cast(sq, DType::BF16);
    Tensor grad = testing::random_tensor(shape, DType::F32, 44);
    Tensor param_gpu = param.to(kOpsGpu), exp_avg_gpu = exp_avg.to(kOpsGpu);
    Tensor exp_avg_sq_gpu = exp_avg_sq.to(kOpsGpu), grad_gpu = grad.to(kOpsGpu);
    Tensor working = Tensor::empty(shape, DType::BF16);
    Tensor working_gpu = poisoned_tensor(shape, DType::BF16);
    for (int64_t step = 5; step <= 6; ++step) {
      const AdamWHyper hyper{3e-4, 0.9, 0.95, 1e-8, 0.1, step};
      adamw_step(param, exp_avg, exp_avg_sq, grad, hyper, working);
      adamw_step(param_gpu, exp_avg_gpu, exp_avg_sq_gpu, grad_gpu, hyper, working_gpu);
    }
    CHECK(testing::bitwise_equal(param_gpu.to(Device::cpu()), param));
    CHECK(testing::bitwise_equal(exp_avg_gpu.to(Device::cpu()), exp_avg));
    CHECK(testing::bitwise_equal(exp_avg_sq_gpu.to(Device::cpu()), exp_avg_sq));
    CHECK(testing::bitwise_equal(working_gpu.to(Device::cpu()), working));
  }

  TEST_CASE("gpu: accumulate and scale_inplace match the CPU ops") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const Variant& variant : kVariants) {
      for (int64_t dim : {4096, 77}) {
        for (int64_t first_row : {0, 1}) {  // a view one row in: off the 16-byte grid for dim 77
          CAPTURE(variant.name);
          CAPTURE(dim);
          CAPTURE(first_row);
          const DType dt = variant.dtype;
          const int64_t rows = 257;
          Tensor acc = random_as({rows, dim}, dt, 41), x = random_as({rows, dim}, dt, 42);

          Tensor expected = acc.clone();
          accumulate(expected.rows(first_row, rows), x.rows(first_row, rows));
          Tensor acc_gpu = to_gpu(acc, dt), x_gpu = to_gpu(x, dt);
          accumulate(acc_gpu.rows(first_row, rows), x_gpu.rows(first_row, rows));
          check_close(acc_gpu, expected, variant.tolerance, "accumulate");

          // Scaling starts from the GPU's sums (exactly, in f32), so that it is checked on its own.
          Tensor scaled = cast(acc_gpu.to(Device::cpu()), DType::F32);
          scale_inplace(scaled.rows(first_row, rows), 0.37);
          scale_inplace(acc_gpu.rows(first_row, rows), 0.37);
          check_close(acc_gpu, scaled, variant.tolerance, "scale_inplace");
        }
      }
    }
  }

  TEST_CASE("gpu: sum_of_squares matches the CPU within 1e-6") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const Variant& variant : kVariants) {
      for (int64_t dim : {4096, 77}) {
        for (int64_t first_row : {0, 1}) {
          CAPTURE(variant.name);
          CAPTURE(dim);
          CAPTURE(first_row);
          const int64_t rows = 257;
          Tensor t = random_as({rows, dim}, variant.dtype, 51, 3.0);
          const double expected = sum_of_squares(t.rows(first_row, rows));
          const double actual = sum_of_squares(to_gpu(t, variant.dtype).rows(first_row, rows));
          CAPTURE(expected);
          CAPTURE(actual);
          CHECK(std::fabs(actual - expected) <= kSumOfSquaresTolerance * expected);
        }
      }
    }
    CHECK(sum_of_squares(Tensor::empty({0}, DType::F32, kOpsGpu)) == 0.0);
  }

  // The gradient norm's batch: one launch and one wait for every tensor's sum, each tensor
  // reduced on its own chunks in a fixed order, so the same bits as sum_of_squares one by one.
  TEST_CASE("gpu: sums_of_squares of a batch gives each tensor's sum_of_squares bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // A model's worth of gradients: f32 and bf16, large and small, an empty one, a view.
    std::vector<Tensor> gpu;
    std::vector<double> one_by_one;
    for (int64_t i = 0; i < 290; ++i) {
      const Variant& variant = kVariants[i % 2];
      // Tensor 7 spans 47 chunks of the kernel's 65536 elements; the rest one or two.
      const int64_t rows = i == 7 ? 12000 : i % 7 == 0 ? 512 : 3 + i % 5;
      Tensor t =
          to_gpu(random_as({rows + 1, 257}, variant.dtype, 60 + static_cast<uint64_t>(i), 2.0),
                 variant.dtype)
              .rows(1, rows);
      if (i == 5) t = Tensor::empty({0}, variant.dtype, kOpsGpu);
      gpu.push_back(t);
    }
    sum_of_squares(gpu.back());  // waits for the stream: the copies end before the clocks start
    const auto start_each = std::chrono::steady_clock::now();
    for (const Tensor& t : gpu) one_by_one.push_back(sum_of_squares(t));
    const auto start_batch = std::chrono::steady_clock::now();
    const std::vector<double> batched = sums_of_squares(gpu);
    const auto end = std::chrono::steady_clock::now();
    REQUIRE(batched.size() == gpu.size());
    for (size_t i = 0; i < gpu.size(); ++i) {
      CAPTURE(i);
      CHECK(batched[i] == one_by_one[i]);
      const double on_cpu = sum_of_squares(cast(gpu[i].to(Device::cpu()), DType::F32));
      CHECK(std::fabs(batched[i] - on_cpu) <= kSumOfSquaresTolerance * on_cpu);
    }
    CHECK(batched[5] == 0.0);
    using Ms = std::chrono::duration<double, std::milli>;
    MESSAGE("290 tensors: one by one " << Ms(start_batch - start_each).count() << " ms, batched "
                                       << Ms(end - start_batch).count() << " ms");
  }

  // Muon's orthogonalisation in bf16 on the device against the CPU's f32: the same map, within
  // bf16's rounding (Jordan's reference runs it in bf16 for the same reason: the result only
  // needs its singular values near 1).
  TEST_CASE("gpu: newton_schulz5 in bf16 matches the CPU's f32 iteration on wide and tall matrices") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const Shape& shape : {Shape{256, 768}, Shape{768, 256}, Shape{128, 128}}) {
      CAPTURE(shape);
      const Tensor g = testing::random_tensor(shape, DType::F32, 71);
      const Tensor expected = Tensor::empty(shape, DType::F32);
      newton_schulz5(g, expected, 5);
      const Tensor g_gpu = g.to(kOpsGpu);
      const Tensor out_gpu = Tensor::empty(shape, DType::F32, kOpsGpu);
      newton_schulz5(g_gpu, out_gpu, 5);
      const double error = testing::relative_l2_error(out_gpu.to(Device::cpu()), expected);
      CAPTURE(error);
      CHECK(error < 3e-2);
    }
  }

  TEST_CASE("gpu: cross_entropy_zero_untrained zeroes the untrained rows as the CPU twin does") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const Variant& variant : kVariants) {
      CAPTURE(variant.name);
      const int64_t T = 37, V = 1000;
      const Tensor dlogits = random_as({T, V}, variant.dtype, 81, 1.0);
      const Tensor losses = testing::random_tensor({T}, DType::F32, 82);
      Tensor trained = Tensor::empty({T}, DType::U8);
      for (int64_t t = 0; t < T; ++t) trained.data<uint8_t>()[t] = t % 3 == 0 ? 0 : 1;
      const Tensor dlogits_gpu = to_gpu(dlogits, variant.dtype);
      const Tensor losses_gpu = losses.to(kOpsGpu);
      cross_entropy_zero_untrained(losses_gpu, dlogits_gpu, trained.to(kOpsGpu));
      // The CPU twin on the same values (random_as's are exact in the variant's dtype).
      const Tensor expected = dlogits.clone();
      const Tensor expected_losses = losses.clone();
      cross_entropy_zero_untrained(expected_losses, expected, trained);
      CHECK(testing::bitwise_equal(cast(dlogits_gpu.to(Device::cpu()), DType::F32), expected));
      CHECK(testing::bitwise_equal(losses_gpu.to(Device::cpu()), expected_losses));
    }
  }

}  // TEST_SUITE
