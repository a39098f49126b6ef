// titan_bench: what the CUDA backend achieves on this GPU, measured on Llama 3 8B's shapes.
//
//   build/titan_bench [--tokens 8192] [--only gemm,quantize,producer,attention] [--json FILE]
//
//   gemm       each GEMM of a linear (output, grad_input, grad_weight) for wqkv, wo, w13, w2 and
//              output at T tokens, in bf16 and in every FP8 recipe, with the quantize kernels each
//              GEMM's operands need timed beside it; the whole linear (3 GEMMs + quantization)
//              as a speed-up over bf16. Weights are quantized every step, as without FSDP's
//              precomputed float8 all-gather.
//   quantize   GB/s of the fused quantize kernels (plain and transposed) at every granularity,
//              against the device-to-device copy bandwidth measured in the same run
//   producer   the ops that write an FP8 linear's x or dy (RMSNorm, SwiGLU, dSwiGLU, the norm's
//              backward) with the quantization the linear needs: the op and the quantize
//              kernels apart, as the linear prepares them, against the fused producer
//              (fp8/producer_quantize.h), per recipe granularity, at T tokens of the 8B shape
//   attention  causal GQA attention forward and backward at S = 8192, Dh = 128 (8B: 32 heads,
//              8 kv heads), on every backend this build has: the native kernels, cuDNN's
//              fused attention where it is compiled in and libcudnn loads, and the Hopper
//              forward (with the native backward) on an sm_90a build on a Hopper GPU (each line
//              names it);
//              then block_causal on the native kernels, the same window holding 8 documents of
//              mean length 1,024: its speed-up over the causal window against their FLOP ratio
//
// Figures are printed as a table and as JSON lines (one object per measurement). They are
// measurements, not tests: nothing here passes or fails. Exit code 2 with one line on a bad flag
// or without a CUDA device that runs what was asked; 1 when a measurement fails.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"  // defines: OutOfMemory
#include "core/cast.h"
#include "core/cuda/device_query.h"
#include "core/cuda/stream.h"
#include "core/exit_code.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "fp8/producer_quantize.h"
#include "fp8/recipe.h"
#include "fp8/scaled_gemm.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/swiglu.h"
#include "tools/bench/timing.h"

using namespace titan;

namespace {

struct Record {
  std::string bench;   // gemm | linear | quantize | producer | attention | copy
  std::string name;    // layer, kernel or pass
  std::string recipe;  // bf16 or an FP8 recipe; granularity for quantize
  std::string detail;  // the GEMM's shape, the operand
  double ms = 0;
  double tflops = 0;       // 0 where not a FLOP count
  double gb_per_s = 0;     // 0 where not a bandwidth
  double quantize_ms = 0;  // gemm: the operands' quantize kernels
  double speedup = 0;      // linear: over the bf16 linear; block_causal: over causal;
                           // producer: fused over apart
};

std::string json(const Record& r) {
  std::ostringstream os;
  os << "{\"bench\":\"" << r.bench << "\",\"name\":\"" << r.name << "\",\"recipe\":\"" << r.recipe
     << "\",\"detail\":\"" << r.detail << "\",\"ms\":" << r.ms;
  if (r.tflops > 0) os << ",\"tflops\":" << r.tflops;
  if (r.gb_per_s > 0) os << ",\"gb_per_s\":" << r.gb_per_s;
  if (r.quantize_ms > 0) os << ",\"quantize_ms\":" << r.quantize_ms;
  if (r.speedup > 0) os << ",\"speedup_vs_bf16\":" << r.speedup;
  os << "}";
  return os.str();
}

Device gpu() { return Device::cuda(cuda::current_device()); }

// Random values in [-scale, scale) on the device, without generating gigabytes on the host:
// one 4 Mi-element random block, repeated. (Never zeros: they hide bugs and run faster.)
Tensor random_device(const Shape& shape, DType dtype, uint64_t seed, double scale) {
  const int64_t block = std::min<int64_t>(shape.numel(), int64_t{1} << 22);
  Tensor host = Tensor::empty({block}, DType::F32);
  CounterRng rng(seed, "titan_bench");
  float* p = host.data<float>();
  for (int64_t i = 0; i < block; ++i) p[i] = static_cast<float>(scale * (2 * rng.uniform(i) - 1));
  Tensor pattern = cast(host.to(gpu()), dtype);
  Tensor t = Tensor::empty(shape, dtype, gpu());
  Tensor flat = t.view({shape.numel()});
  for (int64_t start = 0; start < shape.numel(); start += block) {
    int64_t n = std::min(block, shape.numel() - start);
    flat.narrow(0, start, n).copy_from(pattern.narrow(0, 0, n));
  }
  return t;
}

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

struct LinearShape {
  const char* name;
  int64_t in, out;
};
// Llama 3 8B (dim 4096, 32 heads of 128, 8 kv heads, ffn 14336, vocab 128256).
constexpr LinearShape kLlama8B[] = {{"wqkv", 4096, 6144},
                                    {"wo", 4096, 4096},
                                    {"w13", 4096, 28672},
                                    {"w2", 14336, 4096},
                                    {"output", 4096, 128256}};

// One GEMM of a linear: out = A · Bᵀ where A, B are (maybe transposed) copies of x, w or dy.
struct GemmOperands {
  const char* gemm;
  const Tensor* a;
  bool a_transposed;
  const Tensor* b;
  bool b_transposed;
  Shape out_shape;
  DType out_dtype;
};

fp8::Float8Tensor quantize_operand(const Tensor& source, bool transposed,
                                   const fp8::OperandScaling& s) {
  return transposed ? fp8::quantize_transposed(source, s.granularity, s.format, s.power_of_two)
                    : fp8::quantize(source, s.granularity, s.format, s.power_of_two);
}

// What a linear does to get a GEMM operand: quantize it in the orientation the GEMM reads —
// except that a tensorwise-scaled transposed operand is the byte transpose of the codes the
// other orientation already has (same scale, exactly the same codes; fp8/float8_tensor.h),
// which moves 2 bytes an element instead of reading the bf16 tensor twice more.
fp8::Float8Tensor linear_operand(const Tensor& source, bool transposed,
                                 const fp8::OperandScaling& s,
                                 const std::map<const Tensor*, fp8::Float8Tensor>& quantized) {
  if (transposed && s.granularity == fp8::Granularity::Tensorwise) {
    return fp8::transpose_tensorwise(quantized.at(&source));
  }
  return quantize_operand(source, transposed, s);
}

void bench_linears(int64_t tokens, const bench::Timing& timing, std::vector<Record>& records) {
  for (const LinearShape& shape : kLlama8B) {
    Tensor x = random_device({tokens, shape.in}, DType::BF16, 1, 1.0);
    Tensor w = random_device({shape.out, shape.in}, DType::BF16, 2, 0.02);
    Tensor dy = random_device({tokens, shape.out}, DType::BF16, 3, 1e-3);
    const double flops = 2.0 * static_cast<double>(tokens) * shape.in * shape.out;
    std::vector<GemmOperands> gemms = {
        {"output", &x, false, &w, false, {tokens, shape.out}, DType::BF16},
        {"grad_input", &dy, false, &w, true, {tokens, shape.in}, DType::BF16},
        {"grad_weight", &dy, true, &x, true, {shape.out, shape.in}, DType::F32}};

    // bf16: the three GEMMs as the Linear issues them (core/gemm.h, cuBLASLt, fp32 accumulate).
    double bf16_linear_ms = 0;
    for (const GemmOperands& g : gemms) {
      Tensor out = Tensor::empty(g.out_shape, g.out_dtype, gpu());
      std::string gemm = g.gemm;
      auto run = [&] {
        if (gemm == "output") titan::gemm(x, false, w, true, out);
        if (gemm == "grad_input") titan::gemm(dy, false, w, false, out);
        if (gemm == "grad_weight") titan::gemm(dy, true, x, false, out);
      };
      double ms = bench::median_ms(run, timing);
      bf16_linear_ms += ms;
      records.push_back({"gemm", shape.name, "bf16", gemm, ms, tflops(flops, ms)});
    }
    records.push_back({"linear", shape.name, "bf16", "3 GEMMs", bf16_linear_ms,
                       tflops(3 * flops, bf16_linear_ms), 0, 0, 1.0});

    for (fp8::RecipeKind kind : fp8::kRecipeKinds) {
      const fp8::Recipe recipe = fp8::make_recipe(kind);
      const std::string name(recipe.name());
      const fp8::GemmScaling* scalings[] = {&recipe.output, &recipe.grad_input,
                                            &recipe.grad_weight};
      // The untransposed codes of x, w and dy, for linear_operand's tensorwise transposes (each
      // is quantized, and timed, by the GEMM that reads it untransposed).
      std::map<const Tensor*, fp8::Float8Tensor> quantized;
      for (size_t i = 0; i < gemms.size(); ++i) {
        if (scalings[i]->high_precision) continue;
        const GemmOperands& g = gemms[i];
        if (!g.a_transposed) quantized.emplace(g.a, quantize_operand(*g.a, false, scalings[i]->a));
        if (!g.b_transposed) quantized.emplace(g.b, quantize_operand(*g.b, false, scalings[i]->b));
      }
      double linear_ms = 0;
      for (size_t i = 0; i < gemms.size(); ++i) {
        const GemmOperands& g = gemms[i];
        Tensor out = Tensor::empty(g.out_shape, g.out_dtype, gpu());
        if (scalings[i]->high_precision) {  // rowwise_with_gw_hp's grad_weight
          double ms = bench::median_ms([&] { titan::gemm(dy, true, x, false, out); }, timing);
          linear_ms += ms;
          records.push_back({"gemm", shape.name, name, g.gemm, ms, tflops(flops, ms)});
          continue;
        }
        const fp8::GemmScaling& s = *scalings[i];
        double quantize_ms = bench::median_ms(
            [&] {
              linear_operand(*g.a, g.a_transposed, s.a, quantized);
              linear_operand(*g.b, g.b_transposed, s.b, quantized);
            },
            timing);
        fp8::Float8Tensor a = linear_operand(*g.a, g.a_transposed, s.a, quantized);
        fp8::Float8Tensor b = linear_operand(*g.b, g.b_transposed, s.b, quantized);
        // Fast accumulation on the forward GEMM only, as TransformerEngine and torchao do.
        bool fast_accumulation = i == 0;
        double ms = bench::median_ms([&] { fp8::scaled_gemm(a, b, out, false, fast_accumulation); },
                                     timing);
        linear_ms += ms + quantize_ms;
        Record r{"gemm", shape.name, name, g.gemm, ms, tflops(flops, ms)};
        r.quantize_ms = quantize_ms;
        records.push_back(r);
      }
      records.push_back({"linear", shape.name, name, "3 GEMMs + quantize", linear_ms,
                         tflops(3 * flops, linear_ms), 0, 0, bf16_linear_ms / linear_ms});
    }
  }
}

void bench_quantize(int64_t tokens, const bench::Timing& timing, std::vector<Record>& records) {
  double copy_bw = bench::copy_bandwidth_bytes_per_s(timing);
  records.push_back({"copy", "device-to-device", "-", "1 GiB", 0, 0, copy_bw / 1e9});
  // The activations of w13 ([T, 4096]) and its output gradient ([T, 28672]), bf16.
  const std::pair<const char*, Shape> operands[] = {{"x", {tokens, 4096}}, {"dy", {tokens, 28672}}};
  const std::pair<const char*, fp8::Granularity> granularities[] = {
      {"tensorwise", fp8::Granularity::Tensorwise},
      {"rowwise", fp8::Granularity::Rowwise},
      {"1x128", fp8::Granularity::Block1x128},
      {"128x128", fp8::Granularity::Block128x128}};
  for (const auto& [operand, shape] : operands) {
    Tensor x = random_device(shape, DType::BF16, 4, 1.0);
    for (const auto& [granularity_name, granularity] : granularities) {
      for (bool transposed : {false, true}) {
        fp8::OperandScaling s{granularity, fp8::Format::E4M3,
                              granularity == fp8::Granularity::Rowwise};
        double ms = bench::median_ms([&] { quantize_operand(x, transposed, s); }, timing);
        // The fewest bytes: read bf16 once, write one code per element (scales are noise).
        double bytes = static_cast<double>(x.numel()) * 3;
        std::string detail = std::string(operand) + " " + (transposed ? "transposed " : "") +
                             std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
        Record r{"quantize",
                 transposed ? "quantize_transposed" : "quantize",
                 granularity_name,
                 detail,
                 ms,
                 0,
                 bytes / (ms * 1e-3) / 1e9};
        records.push_back(r);
      }
    }
  }
}

// block_causal on the native kernels (cuDNN's graphs here mask causally only): the causal
// window of bench_attention holding 8 documents of mean length 1,024, lengths spread from 300
// to 2,000 so that boundaries fall inside tiles. The FLOPs counted are those of the documents'
// causal triangles, Σ n²/2 per head; the forward+backward line's speed-up is the causal
// window's time over this one's, to set against the FLOP ratio its detail gives.
void bench_block_causal(const bench::Timing& timing, std::vector<Record>& records,
                        const model::AttentionShape& shape, const Tensor& qkv, const Tensor& dout,
                        double causal_fwd_flops) {
  const std::vector<int64_t> lengths = {1500, 300, 1024, 2000, 700, 1100, 500, 1068};
  std::vector<int32_t> starts;
  double squares = 0;
  for (int64_t n : lengths) {
    const int32_t first = static_cast<int32_t>(starts.size());
    for (int64_t i = 0; i < n; ++i) starts.push_back(first);
    squares += static_cast<double>(n) * static_cast<double>(n);
  }
  TT_CHECK(static_cast<int64_t>(starts.size()) == shape.seq_len, "bench: documents of ",
           starts.size(), " tokens in a window of ", shape.seq_len);
  const Tensor doc_start = Tensor::from_vector<int32_t>(starts, {1, shape.seq_len}).to(gpu());
  Tensor out = Tensor::empty({shape.seq_len, shape.n_heads * shape.head_dim}, DType::BF16, gpu());
  Tensor lse = Tensor::empty({1, shape.n_heads, shape.seq_len}, DType::F32, gpu());
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::BF16, gpu());
  auto causal_ms = [&] {
    double ms = 0;
    for (const Record& r : records) {
      if (r.bench == "attention" && r.name == "forward+backward" && r.recipe == "bf16 native") {
        ms = r.ms;
      }
    }
    return ms;
  };
  const double fwd_flops =
      causal_fwd_flops * squares /
      (static_cast<double>(shape.seq_len) * static_cast<double>(shape.seq_len));
  const double flop_ratio = causal_fwd_flops / fwd_flops;
  char detail[96];
  std::snprintf(detail, sizeof detail, "8 docs mean 1024 FLOPs/%.2f", flop_ratio);
  const double fwd =
      bench::median_ms([&] { model::attention_forward(out, lse, qkv, shape, doc_start); }, timing);
  model::attention_forward(out, lse, qkv, shape, doc_start);
  const double bwd = bench::median_ms(
      [&] { model::attention_backward(dqkv, dout, qkv, out, lse, shape, doc_start); }, timing);
  const std::string recipe = "bf16 native block";
  records.push_back({"attention", "forward", recipe, detail, fwd, tflops(fwd_flops, fwd)});
  records.push_back({"attention", "backward", recipe, detail, bwd, tflops(2.5 * fwd_flops, bwd)});
  Record both{"attention", "forward+backward", recipe,
              detail,      fwd + bwd,          tflops(3.5 * fwd_flops, fwd + bwd)};
  both.speedup = causal_ms() > 0 ? causal_ms() / (fwd + bwd) : 0;
  records.push_back(both);
}

// The producers of an FP8 linear's operands at the 8B shape, bf16: the op then the linear's own
// preparation of its output (the quantize kernels; for a tensorwise dy also dyᵀ, the
// grad-weight GEMM's), against the fused producer writing the same operands.
void bench_producers(int64_t tokens, const bench::Timing& timing, std::vector<Record>& records) {
  constexpr int64_t D = 4096, F = 14336;
  const DType bf16 = DType::BF16;
  const Tensor x = random_device({tokens, D}, bf16, 7, 2.0);
  const Tensor residual = random_device({tokens, D}, bf16, 8, 1.0);
  const Tensor weight = random_device({D}, bf16, 9, 1.0);
  const Tensor h13 = random_device({tokens, 2 * F}, bf16, 10, 3.0);
  const Tensor dg = random_device({tokens, F}, bf16, 11, 1.0);
  const Tensor dy = random_device({tokens, D}, bf16, 12, 1.0);
  Tensor y = Tensor::empty({tokens, D}, bf16, gpu()), h = x.clone();
  Tensor rstd = Tensor::empty({tokens}, DType::F32, gpu());
  Tensor g = Tensor::empty({tokens, F}, bf16, gpu());
  Tensor dh13 = Tensor::empty({tokens, 2 * F}, bf16, gpu());
  Tensor dx = Tensor::empty({tokens, D}, bf16, gpu());
  Tensor dweight = Tensor::zeros({D}, DType::F32, gpu());
  struct Scaling {
    const char* name;
    fp8::OperandScaling x, dy;  // as fp8/recipe.cpp sets the output's a and grad_input's a
  };
  const Scaling scalings[] = {{"tensorwise",
                               {fp8::Granularity::Tensorwise, fp8::Format::E4M3, false},
                               {fp8::Granularity::Tensorwise, fp8::Format::E5M2, false}},
                              {"rowwise",
                               {fp8::Granularity::Rowwise, fp8::Format::E4M3, true},
                               {fp8::Granularity::Rowwise, fp8::Format::E4M3, true}},
                              {"1x128",
                               {fp8::Granularity::Block1x128, fp8::Format::E4M3, false},
                               {fp8::Granularity::Block1x128, fp8::Format::E4M3, false}}};
  for (const Scaling& s : scalings) {
    const bool tensorwise = s.x.granularity == fp8::Granularity::Tensorwise;
    const fp8::ProducerQuantization qx{s.x, false, nullptr};
    const fp8::ProducerQuantization qdy{s.dy, tensorwise, nullptr};
    // What Float8Gemms prepares from a producer's output without the fusion.
    auto prepare_x = [&](const Tensor& t) { quantize_operand(t, false, s.x); };
    auto prepare_dy = [&](const Tensor& t) {
      quantize_operand(t, false, s.dy);
      if (tensorwise) quantize_operand(t, true, s.dy);
    };
    struct Producer {
      const char* name;
      std::function<void()> apart, fused;
      std::string detail;
    };
    const Producer producers[] = {
        {"rmsnorm>wqkv",
         [&] {
           model::rmsnorm_forward(y, rstd, x, weight, 1e-5);
           prepare_x(y);
         },
         [&] { fp8::rmsnorm_forward_quantized(y, rstd, x, weight, 1e-5, qx); },
         "x " + std::to_string(tokens) + "x4096"},
        {"add_rmsnorm>w13",
         [&] {
           model::add_rmsnorm_forward(y, rstd, h, residual, weight, 1e-5);
           prepare_x(y);
         },
         [&] { fp8::add_rmsnorm_forward_quantized(y, rstd, h, residual, weight, 1e-5, qx); },
         "x " + std::to_string(tokens) + "x4096"},
        {"swiglu>w2",
         [&] {
           model::swiglu_forward(g, h13);
           prepare_x(g);
         },
         [&] { fp8::swiglu_forward_quantized(g, h13, qx); },
         "x " + std::to_string(tokens) + "x14336"},
        {"dswiglu>w13",
         [&] {
           model::swiglu_backward(dh13, dg, h13);
           prepare_dy(dh13);
         },
         [&] { fp8::swiglu_backward_quantized(dh13, dg, h13, qdy); },
         "dy " + std::to_string(tokens) + "x28672"},
        {"rmsnorm_bwd>wo",
         [&] {
           model::rmsnorm_backward_add(dx, dweight, dy, x, weight, rstd, residual);
           prepare_dy(dx);
         },
         [&] {
           fp8::rmsnorm_backward_add_quantized(dx, dweight, dy, x, weight, rstd, residual, qdy);
         },
         "dy " + std::to_string(tokens) + "x4096"},
    };
    for (const Producer& p : producers) {
      const double apart = bench::median_ms(p.apart, timing);
      const double fused = bench::median_ms(p.fused, timing);
      records.push_back({"producer", p.name, s.name, p.detail + " apart", apart});
      Record r{"producer", p.name, s.name, p.detail + " fused", fused};
      r.speedup = apart / fused;
      records.push_back(r);
    }
  }
}

// Every attention backend this build has, one after the other on the same tensors, each line
// named by its backend (recipe "bf16 native", "bf16 cudnn", "bf16 hopper"). A backend that cannot
// run here is a line on stderr saying why.
void bench_attention(const bench::Timing& timing, std::vector<Record>& records) {
  model::AttentionShape shape{1, 8192, 32, 8, 128};
  const int64_t tokens = shape.batch * shape.seq_len;
  const int64_t width = (shape.n_heads + 2 * shape.n_kv_heads) * shape.head_dim;
  Tensor qkv = random_device({tokens, width}, DType::BF16, 5, 1.0);
  Tensor out = Tensor::empty({tokens, shape.n_heads * shape.head_dim}, DType::BF16, gpu());
  Tensor lse = Tensor::empty({shape.batch, shape.n_heads, shape.seq_len}, DType::F32, gpu());
  Tensor dout = random_device(out.shape(), DType::BF16, 6, 1.0);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::BF16, gpu());
  // Causal: half of the S×S scores. Forward 2 GEMMs (QKᵀ, PV), backward 5 (FlashAttention-2's
  // count, recomputing QKᵀ): 2.5× the forward.
  double fwd_flops =
      4.0 * shape.batch * shape.n_heads * shape.seq_len * shape.seq_len * shape.head_dim / 2;
  const std::string detail = "B1 S8192 H32 Hkv8 Dh128 causal";
  for (model::AttentionBackend backend :
       {model::AttentionBackend::Native, model::AttentionBackend::Cudnn,
        model::AttentionBackend::Hopper}) {
    const model::AttentionBackendChoice choice = model::choose_attention_backend(backend, shape);
    if (!choice.error.empty()) {
      std::fprintf(stderr, "titan_bench: attention on %s not measured: %s\n",
                   std::string(model::kAttentionBackends.name(backend)).c_str(),
                   choice.error.c_str());
      continue;
    }
    std::fprintf(stderr, "titan_bench: %s\n", choice.line.c_str());
    model::AttentionShape on = shape;
    on.backend = choice.backend;
    const std::string recipe = "bf16 " + std::string(model::kAttentionBackends.name(backend));
    double fwd = bench::median_ms([&] { model::attention_forward(out, lse, qkv, on); }, timing);
    model::attention_forward(out, lse, qkv, on);
    double bwd =
        bench::median_ms([&] { model::attention_backward(dqkv, dout, qkv, out, lse, on); }, timing);
    records.push_back({"attention", "forward", recipe, detail, fwd, tflops(fwd_flops, fwd)});
    // hopper's backward is the native one: its line would repeat native's.
    if (backend != model::AttentionBackend::Hopper) {
      records.push_back(
          {"attention", "backward", recipe, detail, bwd, tflops(2.5 * fwd_flops, bwd)});
    }
    records.push_back({"attention", "forward+backward", recipe, detail, fwd + bwd,
                       tflops(3.5 * fwd_flops, fwd + bwd)});
  }
  bench_block_causal(timing, records, shape, qkv, dout, fwd_flops);
}

void print_table(const std::vector<Record>& records, const CudaDeviceInfo& device) {
  std::printf("\ntitan_bench on %s (sm_%d%d, %d SMs)\n", device.name.c_str(), device.major,
              device.minor, device.multiprocessors);
  std::printf("%-10s %-20s %-19s %-28s %9s %8s %8s %9s %8s\n", "bench", "name", "recipe", "detail",
              "ms", "TFLOP/s", "GB/s", "quant ms", "speedup");
  for (const Record& r : records) {
    auto num = [](double v, const char* fmt) {
      char buf[32];
      if (v > 0)
        std::snprintf(buf, sizeof buf, fmt, v);
      else
        std::snprintf(buf, sizeof buf, "-");
      return std::string(buf);
    };
    std::printf("%-10s %-20s %-19s %-28s %9s %8s %8s %9s %8s\n", r.bench.c_str(), r.name.c_str(),
                r.recipe.c_str(), r.detail.c_str(), num(r.ms, "%.3f").c_str(),
                num(r.tflops, "%.0f").c_str(), num(r.gb_per_s, "%.0f").c_str(),
                num(r.quantize_ms, "%.3f").c_str(), num(r.speedup, "%.2fx").c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"titan_bench: GEMM, FP8 quantize and attention throughput of the CUDA backend"};
  int64_t tokens = 8192;
  std::string only = "gemm,quantize,producer,attention";
  std::string json_path;
  bench::Timing timing;
  app.add_option("--tokens", tokens, "tokens T of the linears' GEMMs")->capture_default_str();
  app.add_option("--only", only, "comma-separated benches to run")->capture_default_str();
  app.add_option("--json", json_path, "write the JSON lines here instead of stdout");
  app.add_option("--repeats", timing.repeats, "timed runs per figure (median)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return exit_status(ExitCode::Ok);
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes would be none of ExitCode's: a bad flag is bad input.
    std::fprintf(stderr, "titan_bench: error: %s (see --help)\n", e.what());
    return exit_status(ExitCode::BadInput);
  }
  // Bad input: one line, exit 2, before any device work.
  auto refuse = [](const std::string& line) {
    std::fprintf(stderr, "titan_bench: error: %s\n", line.c_str());
    return exit_status(ExitCode::BadInput);
  };

  std::set<std::string> benches;
  std::stringstream list(only);
  for (std::string item; std::getline(list, item, ',');) benches.insert(item);
  for (const std::string& b : benches) {
    if (b != "gemm" && b != "quantize" && b != "producer" && b != "attention") {
      return refuse("--only: unknown bench '" + b + "'; use gemm, quantize, producer, attention");
    }
  }
  if (benches.empty()) {
    return refuse("--only: names no bench; give some of gemm, quantize, producer, attention");
  }
  // The FP8 GEMMs (cuBLASLt) need every dim a multiple of 16, and T is one of them.
  if (tokens <= 0 || tokens % 16 != 0) {
    return refuse("--tokens " + std::to_string(tokens) +
                  ": give a positive multiple of 16 (the FP8 GEMMs' dims), e.g. 8192");
  }
  if (timing.repeats < 1) {
    return refuse("--repeats " + std::to_string(timing.repeats) +
                  ": give 1 or more timed runs per figure, e.g. 20");
  }
  CudaQuery query = query_cuda_devices();
  if (query.devices.empty()) {
    return refuse("no CUDA device (" + query.why_none +
                  "); run it on a machine with an NVIDIA GPU (H100 or H200 for the figures in "
                  "docs/performance.md)");
  }
  const CudaDeviceInfo& device = query.devices.front();
  // Every recipe's GEMM is timed, and the rowwise and blockwise ones are Hopper's.
  if (benches.count("gemm") && device.major * 10 + device.minor < 90) {
    return refuse(
        "--only gemm: the FP8 GEMMs of every recipe need compute capability 9.0 "
        "(Hopper); cuda:" +
        std::to_string(device.index) + " is " + std::to_string(device.major) + "." +
        std::to_string(device.minor) + " (" + device.name +
        "); run it on an H100 or H200, or leave gemm out (--only "
        "quantize,producer,attention)");
  }
  // Opened last of the checks: a refused run leaves no empty file behind.
  std::ofstream json_file;
  if (!json_path.empty()) {
    json_file.open(json_path);
    if (!json_file) {
      return refuse("--json: cannot write '" + json_path +
                    "'; name a file in a folder that exists and that you can write");
    }
  }
  std::vector<Record> records;
  try {
    if (benches.count("gemm")) bench_linears(tokens, timing, records);
    if (benches.count("quantize")) bench_quantize(tokens, timing, records);
    if (benches.count("producer")) bench_producers(tokens, timing, records);
    if (benches.count("attention")) bench_attention(timing, records);
  } catch (const OutOfMemory& e) {
    std::fprintf(stderr, "titan_bench: error: %s; lower --tokens (now %lld)\n", e.what(),
                 static_cast<long long>(tokens));
    return exit_status(ExitCode::Failure);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan_bench: error: %s\n", e.what());
    return exit_status(ExitCode::Failure);
  }
  std::ostream& json_out = json_path.empty() ? std::cout : json_file;
  for (const Record& r : records) json_out << json(r) << "\n";
  json_out.flush();
  print_table(records, query.devices.front());
  return exit_status(ExitCode::Ok);
}
