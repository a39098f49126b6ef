// titan_bench_cpu: the GEMMs of a model's linears through OpenBLAS, as titan_train calls them on
// one CPU rank, timed alone.
//
//   build/titan_bench_cpu [--flavor debugmodel] [--tokens 1024] [--threads N] [--repeats 5]
//
// Per layer, for wqkv, wo, w13 and w2, and once for the output projection: the forward
// y[T, N] = x[T, K]·W[N, K]ᵀ, the input gradient dx[T, K] = dy·W and the weight gradient
// dW[N, K] += dyᵀ·x (model/linear.h's three GEMMs, with the same transposes, through the same
// core/gemm entry), on random f32 operands. One line per GEMM kind and one for the whole set:
// GFLOP/s, the median of --repeats passes over every GEMM of a step. OpenBLAS's core is chosen
// as titan_train chooses it (core/blas_core.h) and named on the first line. Exit 2 with one line
// on a bad flag.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/blas_core.h"  // defines: use_best_blas_core, blas_core_name, blas_core_note
#include "core/exit_code.h"  // defines: ExitCode, exit_status
#include "core/gemm.h"       // defines: gemm, set_cpu_gemm_threads
#include "core/tensor.h"
#include "model/config.h"    // defines: model_flavor, model_flavor_names

namespace {

using titan::Tensor;

struct Linear {
  std::string name;
  int64_t out, in, count;  // N, K, how many a step runs (one per layer, or one)
};

struct Gemm {
  std::string kind;  // "forward", "grad_input", "grad_weight"
  Tensor a, b, c;
  bool ta, tb;
  double beta;
  double flops;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  titan::use_best_blas_core(argv);
  CLI::App app{"titan_bench_cpu: OpenBLAS on a model's linear GEMMs, as titan_train calls them"};
  std::string flavor = "debugmodel";
  int64_t tokens = 1024;
  int threads = 0;
  int repeats = 5;
  app.add_option("--flavor", flavor, "model flavor whose linears are timed")->capture_default_str();
  app.add_option("--tokens", tokens, "tokens T a step (B·S of one rank)")->capture_default_str();
  app.add_option("--threads", threads, "OpenBLAS threads (0: OpenBLAS's own default)");
  app.add_option("--repeats", repeats, "timed passes (median)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return titan::exit_status(titan::ExitCode::Ok);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "titan_bench_cpu: error: %s (see --help)\n", e.what());
    return titan::exit_status(titan::ExitCode::BadInput);
  }
  auto refuse = [](const std::string& line) {
    std::fprintf(stderr, "titan_bench_cpu: error: %s\n", line.c_str());
    return titan::exit_status(titan::ExitCode::BadInput);
  };
  const std::vector<std::string> names = titan::model::model_flavor_names();
  if (std::find(names.begin(), names.end(), flavor) == names.end()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return refuse("--flavor: unknown flavor '" + flavor + "'; use one of " + list);
  }
  if (tokens < 1 || tokens > (int64_t{1} << 20)) {
    return refuse("--tokens " + std::to_string(tokens) + ": give 1 to 1048576, e.g. 1024");
  }
  if (repeats < 1) return refuse("--repeats " + std::to_string(repeats) + ": give 1 or more");
  if (threads < 0) return refuse("--threads " + std::to_string(threads) + ": give 0 or more");
  if (threads > 0) titan::set_cpu_gemm_threads(threads);

  const titan::model::ModelArgs m = titan::model::model_flavor(flavor);
  const std::vector<Linear> linears = {{"wqkv", m.qkv_dim(), m.dim, m.n_layers},
                                       {"wo", m.dim, m.n_heads * m.head_dim(), m.n_layers},
                                       {"w13", 2 * m.ffn_dim, m.dim, m.n_layers},
                                       {"w2", m.dim, m.ffn_dim, m.n_layers},
                                       {"output", m.vocab_size, m.dim, 1}};
  std::vector<Gemm> gemms;
  for (const Linear& l : linears) {
    const Tensor x = Tensor::empty({tokens, l.in}, titan::DType::F32);
    const Tensor w = Tensor::empty({l.out, l.in}, titan::DType::F32);
    const Tensor y = Tensor::empty({tokens, l.out}, titan::DType::F32);
    for (const Tensor& t : {x, w, y}) {
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((i * 7919 % 2003) - 1001) * 1e-3f;
    }
    const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(l.out * l.in);
    for (int64_t i = 0; i < l.count; ++i) {
      gemms.push_back({"forward", x, w, y.clone(), false, true, 0.0, flops});
      gemms.push_back({"grad_input", y, w, x.clone(), false, false, 0.0, flops});
      gemms.push_back({"grad_weight", y, x, w.clone(), true, false, 1.0, flops});
    }
  }
  std::printf("titan_bench_cpu: %s at T %lld, OpenBLAS %s%s\n", flavor.c_str(),
              static_cast<long long>(tokens), titan::blas_core_name().c_str(),
              titan::blas_core_note().empty() ? "" : " (chosen over its generic fallback)");
  const std::vector<std::string> kinds = {"forward", "grad_input", "grad_weight"};
  std::vector<std::vector<double>> seconds(kinds.size() + 1);
  for (int r = 0; r <= repeats; ++r) {  // pass 0 warms up
    std::vector<double> pass(kinds.size(), 0.0);
    for (const Gemm& g : gemms) {
      const auto start = std::chrono::steady_clock::now();
      titan::gemm(g.a, g.ta, g.b, g.tb, g.c, 1.0, g.beta);
      pass[static_cast<size_t>(std::find(kinds.begin(), kinds.end(), g.kind) - kinds.begin())] +=
          seconds_since(start);
    }
    if (r == 0) continue;
    double all = 0;
    for (size_t k = 0; k < kinds.size(); ++k) {
      seconds[k].push_back(pass[k]);
      all += pass[k];
    }
    seconds[kinds.size()].push_back(all);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double total_flops = 0;
  for (const Gemm& g : gemms) total_flops += g.flops;
  for (size_t k = 0; k <= kinds.size(); ++k) {
    double flops = 0;
    for (const Gemm& g : gemms) {
      if (k == kinds.size() || g.kind == kinds[k]) flops += g.flops;
    }
    const double s = median(seconds[k]);
    std::printf("%-12s %5zu GEMMs  %8.2f GFLOP  %8.1f ms  %7.1f GFLOP/s\n",
                k == kinds.size() ? "all" : kinds[k].c_str(),
                k == kinds.size() ? gemms.size() : gemms.size() / kinds.size(), flops * 1e-9,
                s * 1e3, flops / s * 1e-9);
  }
  return titan::exit_status(titan::ExitCode::Ok);
}
