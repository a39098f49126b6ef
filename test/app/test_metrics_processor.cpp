// What a step reports: torchtitan's FLOPs per token against hand counts, the bf16 peaks by device
// name, TFLOP/s, MFU, peak memory and progress; the metrics line and its JSON keys; and the
// processor's windows, each report handed to every sink.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "app/metrics/metric_sinks.h"
#include "app/metrics/metrics_processor.h"
#include "core/progress.h"
#include "core/tensor.h"
#include "model/config.h"
#include "support/metrics_file.h"
#include "support/process.h"

using namespace titan;
using namespace titan::app;

TEST_SUITE("fast") {
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
    // LoRA rank 4 on wqkv and wo: the frozen 5639424 at 4 FLOPs (22557696), the adapters'
    // 6·(4·(3·256 + 256 + 2·256) + 4·(256 + 256)) = 49152 at 6 (294912), the same attention.
    model::ModelArgs lora = debug;
    lora.lora.rank = 4;
    CHECK(model::count_adapter_parameters(lora) == 49152);
    CHECK(model::training_flops_per_token(lora, 256) == 22557696.0 + 294912.0 + 4718592.0);
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

  RunFacts h100_facts() {
    RunFacts f;
    f.tokens_per_step = 8 * 8192;  // 8 sequences of 8192
    f.flops_per_token = 57914449920.0;
    f.peak_tflops = peak_bf16_tflops("NVIDIA H100 80GB HBM3");
    f.world_size = 8;
    f.device_bytes = int64_t{80} << 30;
    f.first_step = 1;
    f.last_step = 100;
    return f;
  }

  double value(const StepReport& r, const char* name) {
    const double* v = r.find(name);
    REQUIRE_MESSAGE(v != nullptr, name);
    return *v;
  }

  TEST_CASE("a report's TFLOP/s and MFU come from the tokens per second of one device") {
    StepWindow w;
    w.steps = 10;
    w.seconds = 10.0 * 8 * 8192 / 56000;  // 56000 tok/s over 8 devices: 7000 each
    w.peak_bytes = 40.0 * (1 << 30);
    w.elapsed_seconds = 123;
    const StepReport r = make_step_report(h100_facts(), 20, 2.5, 0.75, 3e-4, w);
    CHECK(r.step == 20);
    CHECK(value(r, "loss") == 2.5);
    CHECK(value(r, "tokens") == 20.0 * 8 * 8192);
    CHECK(value(r, "tokens_per_s") == doctest::Approx(56000));
    CHECK(value(r, "tokens_per_s_per_device") == doctest::Approx(7000));
    CHECK(value(r, "tflops") == doctest::Approx(405.401149));  // 5.79e10 · 7000 / 1e12
    CHECK(value(r, "mfu") == doctest::Approx(100.0 * 405.401149 / 989));
    CHECK(value(r, "peak_mem_gib") == 40.0);
    CHECK(value(r, "peak_mem_pct") == 50.0);
    CHECK(value(r, "elapsed_s") == 123);
    CHECK(value(r, "eta_s") == doctest::Approx(80 * w.seconds / 10));  // 80 steps left

    RunFacts cpu = h100_facts();
    cpu.peak_tflops = 0;
    cpu.device_bytes = 0;
    const StepReport c = make_step_report(cpu, 100, 2.5, 0.75, 3e-4, w);
    CHECK(c.find("mfu") == nullptr);
    CHECK(c.find("peak_mem_pct") == nullptr);
    CHECK(value(c, "eta_s") == 0);
  }

  TEST_CASE("the metrics line: progress — figures — mfu and memory share only when known") {
    StepWindow w{.steps = 10,
                 .seconds = 10.0 * 8 * 8192 / 56000,
                 .peak_bytes = 40.0 * (1 << 30),
                 .elapsed_seconds = 3725};
    const StepReport r = make_step_report(h100_facts(), 20, 2.5, 0.75, 3e-4, w);
    const std::string line = format_metrics_line(r, 100);
    CAPTURE(line);
    CHECK(line.rfind("step  20/100 (20%)", 0) == 0);
    CHECK(line.find("loss   2.5000") != std::string::npos);
    CHECK(line.find("mem 40.000 GiB (50.0%)") != std::string::npos);
    CHECK(line.find("tflops  405.40") != std::string::npos);
    CHECK(line.find("mfu 40.99%") != std::string::npos);
    CHECK(line.find("elapsed 1h02m") != std::string::npos);
    CHECK(line.find("eta 1m33s") != std::string::npos);  // 80 steps of 1.17 s

    RunFacts cpu = h100_facts();
    cpu.peak_tflops = 0;
    cpu.device_bytes = 0;
    const std::string last =
        format_metrics_line(make_step_report(cpu, 100, 2.5, 0.75, 3e-4, w), 100);
    CHECK(last.find("mfu") == std::string::npos);
    CHECK(last.find("%)  loss") != std::string::npos);
    CHECK(last.find("eta") == std::string::npos);  // nothing left
  }

  TEST_CASE("pipeline figures: each rank's own share and the bubble over the slowest rank") {
    // Rank 0's list took 2 s of which it waited 0.5; rank 1's ended after 1 s (0.25 waited) and
    // it idled the other second in the step's next collective: 2.25 s of 4 computed.
    StepWindow w{.steps = 1,
                 .seconds = 2.5,
                 .peak_bytes = 0,
                 .elapsed_seconds = 2.5,
                 .pp_wait_seconds = 0.5,
                 .pp_seconds = {2.0, 1.0},
                 .pp_wait = {0.5, 0.25}};
    const StepReport r = make_step_report(h100_facts(), 1, 2.5, 0.75, 3e-4, w);
    CHECK(value(r, "pp_wait_ms") == doctest::Approx(500));
    CHECK(value(r, "pp_bubble") == doctest::Approx(1 - 2.25 / 4));
    CHECK(value(r, "pp_bubble_r0") == doctest::Approx(0.25));
    CHECK(value(r, "pp_bubble_r1") == doctest::Approx(0.25));
    CHECK(make_step_report(h100_facts(), 1, 2.5, 0.75, 3e-4, StepWindow{.steps = 1, .seconds = 1})
              .find("pp_bubble") == nullptr);
  }

  TEST_CASE("durations read as a person says them") {
    CHECK(format_duration(0.42) == "0.4s");
    CHECK(format_duration(42) == "42s");
    CHECK(format_duration(187) == "3m07s");
    CHECK(format_duration(7500) == "2h05m");
    CHECK(format_duration(3 * 86400 + 4 * 3600 + 59) == "3d04h");
    CHECK(format_duration(-1) == "?");
    CHECK(format_step_progress(7, 10000) == "step     7/10000 (0%)");
  }

  TEST_CASE(
      "metrics.jsonl: step first — every scalar — whole numbers as integers — old keys kept") {
    StepWindow w{.steps = 10,
                 .seconds = 10.0 * 8 * 8192 / 56000,
                 .peak_bytes = 40.0 * (1 << 30),
                 .elapsed_seconds = 3725};
    StepReport r = make_step_report(h100_facts(), 20, 2.5, 0.75, 3e-4, w);
    const std::string json = format_metrics_json(r);
    CAPTURE(json);
    CHECK(json.rfind("{\"step\": 20, \"loss\": 2.5, ", 0) == 0);
    CHECK(json.find("\"tokens\": 1310720,") != std::string::npos);
    r.scalars.push_back({"nan", std::nan("")});
    CHECK(format_metrics_json(r).find("\"nan\": null}") != std::string::npos);
    r.scalars.pop_back();
    // Every double reads back exactly (losses are compared bit for bit across restarts).
    r.scalars.push_back({"exact", 0.1 + 0.2});
    CHECK(format_metrics_json(r).find("\"exact\": 0.30000000000000004}") != std::string::npos);
    r.scalars.pop_back();

    const std::string path = testing::scratch_dir("metrics") + "/metrics.jsonl";
    {
      JsonlSink sink(path, /*append=*/false);
      sink.write(r);
    }
    {
      JsonlSink sink(path, /*append=*/true);  // a resumed run adds to the file
      RunFacts cpu = h100_facts();
      cpu.peak_tflops = 0;
      cpu.device_bytes = 0;
      sink.write(make_step_report(cpu, 30, 2.4, 0.7, 3e-4, w));
    }
    const auto lines = testing::read_metrics_jsonl(path);
    REQUIRE(lines.size() == 2);
    for (const char* key :
         {"step", "loss", "grad_norm", "lr", "tokens_per_s", "tokens_per_s_per_device", "step_ms",
          "peak_mem_gib", "tflops", "tokens", "elapsed_s", "eta_s"}) {
      CAPTURE(key);
      CHECK(lines[0].count(key) == 1);
      CHECK(lines[1].count(key) == 1);
    }
    CHECK(lines[0].at("step") == 20);
    CHECK(lines[0].at("mfu") == doctest::Approx(40.9910));
    CHECK(lines[0].at("peak_mem_pct") == 50);
    CHECK(lines[1].at("step") == 30);
    CHECK(lines[1].count("mfu") == 0);
    CHECK_THROWS_AS(JsonlSink("/proc/no/such/metrics.jsonl", false), InputError);
  }

  // Keeps every report it is given.
  struct RecordingSink final : MetricSink {
    std::vector<StepReport>* reports;
    std::string* config;
    RecordingSink(std::vector<StepReport>* r, std::string* c) : reports(r), config(c) {}
    void write_config(const std::string& yaml) override { *config = yaml; }
    void write(const StepReport& report) override { reports->push_back(report); }
  };

  TEST_CASE(
      "the processor reports the first step and every log_freq-th and the last to every sink") {
    std::vector<StepReport> first, second;
    std::string config_a, config_b;
    std::vector<std::unique_ptr<MetricSink>> sinks;
    sinks.push_back(std::make_unique<RecordingSink>(&first, &config_a));
    sinks.push_back(std::make_unique<RecordingSink>(&second, &config_b));
    RunFacts facts;
    facts.tokens_per_step = 1000;
    facts.first_step = 3;  // resumed after step 2
    facts.last_step = 12;
    facts.log_freq = 5;
    int collectives = 0;
    Allocator& memory = allocator_for(Device::cpu());
    MetricsProcessor processor(
        facts, memory,
        [&collectives](double v) {
          ++collectives;
          return v + 1;  // as if another rank held one byte more
        },
        std::move(sinks), /*logging_rank=*/false);
    processor.write_config("training:\n  steps: 12\n");
    CHECK(config_b == "training:\n  steps: 12\n");
    processor.start();
    int64_t peak_in_step_4 = 0;
    for (int64_t step = 3; step <= 12; ++step) {
      if (step == 4) {
        Tensor held = Tensor::empty({1 << 20}, DType::F32);  // 4 MiB, freed within the step
        peak_in_step_4 = memory.stats().peak_bytes;
      }
      processor.end_step(step, 10.0 - static_cast<double>(step), 1, 1e-3);
    }
    REQUIRE(first.size() == 4);  // 3 (the first), 5, 10, 12 (the last)
    CHECK(second.size() == 4);
    CHECK(collectives == 4);
    CHECK(first[0].step == 3);
    CHECK(first[1].step == 5);
    CHECK(first[2].step == 10);
    CHECK(first[3].step == 12);
    CHECK(value(first[1], "loss") == 5.0);
    CHECK(value(first[3], "tokens") == 12000);
    // Step 4's 4 MiB is in the window of steps 4..5, and gone from the next one.
    CHECK(value(first[1], "peak_mem_gib") * (1 << 30) == doctest::Approx(peak_in_step_4 + 1));
    CHECK(value(first[2], "peak_mem_gib") < value(first[1], "peak_mem_gib"));
    CHECK(value(first[3], "eta_s") == 0);
    CHECK(processor.reports(3));
    CHECK_FALSE(processor.reports(4));
  }
}
