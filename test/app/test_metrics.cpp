// Throughput metrics: torchtitan's FLOPs per token against hand counts, the bf16 peaks by device
// name, TFLOP/s, MFU and peak memory, and the metrics line and its JSON keys.
#include <doctest/doctest.h>

#include <string>

#include "app/metrics.h"
#include "model/config.h"
#include "support/metrics_file.h"
#include "support/process.h"

using namespace titan;
using namespace titan::app;

TEST_SUITE("unit") {
  TEST_CASE("FLOPs per token are torchtitan's count: 6 per non-embedding weight plus attention") {
    // debugmodel: D 256, L 6, H 16 = Hkv, Dh 16, F 768, V 2048. Per layer: wqkv
    // (16 + 2·16)·16·256 = 196608, wo 256·256 = 65536, w13 2·768·256 = 393216, w2 768·256 =
    // 196608, two norms 512: 852480. Without tok_embeddings: 6·852480 + 256 (final norm) +
    // 2048·256 (output) = 5639424 weights, 6· = 33836544 FLOPs. Attention at S 256:
    // 12·6·16·16·256 = 4718592. Sum 38555136.
    const model::ModelArgs debug = model::model_flavor("debugmodel");
    CHECK(model::training_flops_per_token(debug, 256) == 38555136.0);
    CHECK(model::training_flops_per_token(debug, 2048) == 33836544.0 + 12.0 * 6 * 16 * 16 * 2048);
    // llama3_8b: 8030261248 weights less tok_embeddings' 128256·4096 = 525336576 leaves
    // 7504924672, 6· = 45029548032; attention at S 8192: 12·32·32·128·8192 = 12884901888.
    // Sum 57914449920 (5.79e10: 6·8e9 plus a fifth for attention at this length).
    const model::ModelArgs b8 = model::model_flavor("llama3_8b");
    CHECK(model::training_flops_per_token(b8, 8192) == 57914449920.0);
  }

  TEST_CASE("bf16 peaks by CUDA device name follow torchtitan's get_peak_flops") {
    CHECK(peak_bf16_tflops("NVIDIA H100 80GB HBM3") == 989);  // SXM
    CHECK(peak_bf16_tflops("NVIDIA H100 PCIe") == 756);
    CHECK(peak_bf16_tflops("NVIDIA H100 NVL") == 835);
    CHECK(peak_bf16_tflops("NVIDIA H200") == 989);
    CHECK(peak_bf16_tflops("NVIDIA H200 NVL") == 989);
    CHECK(peak_bf16_tflops("NVIDIA A100-SXM4-80GB") == 312);
    CHECK(peak_bf16_tflops("NVIDIA A100 80GB PCIe") == 312);
    CHECK(peak_bf16_tflops("NVIDIA B200") == 2250);
    CHECK(peak_bf16_tflops("NVIDIA L40S") == 362);
    // Unknown: no MFU rather than torchtitan's A100 guess.
    CHECK(peak_bf16_tflops("NVIDIA GeForce RTX 4090") == 0);
    CHECK(peak_bf16_tflops("cpu") == 0);
    CHECK(peak_bf16_tflops("") == 0);
  }

  TEST_CASE("TFLOP/s and MFU come from the tokens per second of one device") {
    StepMetrics m;
    m.tokens_per_s_per_device = 7000;
    set_flops(m, 57914449920.0, peak_bf16_tflops("NVIDIA H100 80GB HBM3"));
    CHECK(m.tflops == doctest::Approx(405.401149));  // 5.79e10 · 7000 / 1e12
    REQUIRE(m.mfu_pct.has_value());
    CHECK(*m.mfu_pct == doctest::Approx(100.0 * 405.401149 / 989));
    set_flops(m, 57914449920.0, 0);
    CHECK(m.tflops == doctest::Approx(405.401149));
    CHECK_FALSE(m.mfu_pct.has_value());

    set_peak_memory(m, 40.0 * (1 << 30), int64_t{80} << 30);
    CHECK(m.peak_mem_gib == 40.0);
    REQUIRE(m.peak_mem_pct.has_value());
    CHECK(*m.peak_mem_pct == 50.0);
    set_peak_memory(m, 0.5 * (1 << 30), 0);
    CHECK(m.peak_mem_gib == 0.5);
    CHECK_FALSE(m.peak_mem_pct.has_value());
  }

  TEST_CASE("the metrics line and its JSON keys: tflops always, mfu and memory share when known") {
    StepMetrics m;
    m.step = 10;
    m.loss = 2.5;
    m.grad_norm = 0.75;
    m.lr = 3e-4;
    m.tokens_per_s = 56000;
    m.tokens_per_s_per_device = 7000;
    m.step_ms = 1170.3;
    set_peak_memory(m, 40.0 * (1 << 30), int64_t{80} << 30);
    set_flops(m, 57914449920.0, 989);
    const std::string line = format_metrics_line(m);
    CHECK(line.find("mem 40.000 GiB (50.0%)") != std::string::npos);
    CHECK(line.find("tflops  405.40") != std::string::npos);
    CHECK(line.find("mfu 40.99%") != std::string::npos);

    StepMetrics cpu = m;
    set_peak_memory(cpu, 0.25 * (1 << 30), 0);
    set_flops(cpu, 38555136.0, peak_bf16_tflops("cpu"));
    CHECK(format_metrics_line(cpu).find("mfu") == std::string::npos);

    const std::string path = testing::scratch_dir("metrics") + "/metrics.jsonl";
    {
      MetricsLogger logger(path, true, false);
      logger.log(m);
      logger.log(cpu);
    }
    const auto lines = testing::read_metrics_jsonl(path);
    REQUIRE(lines.size() == 2);
    // The keys of earlier versions, unchanged.
    for (const char* key : {"step", "loss", "grad_norm", "lr", "tokens_per_s",
                            "tokens_per_s_per_device", "step_ms", "peak_mem_gib"}) {
      CAPTURE(key);
      CHECK(lines[0].count(key) == 1);
      CHECK(lines[1].count(key) == 1);
    }
    CHECK(lines[0].at("step") == 10);
    CHECK(lines[0].at("tflops") == doctest::Approx(405.401));
    CHECK(lines[0].at("mfu") == doctest::Approx(40.9910));
    CHECK(lines[0].at("peak_mem_pct") == 50);
    CHECK(lines[1].at("tflops") == doctest::Approx(0.269886));  // 38555136 · 7000 / 1e12
    CHECK(lines[1].count("mfu") == 0);
    CHECK(lines[1].count("peak_mem_pct") == 0);
  }
}
