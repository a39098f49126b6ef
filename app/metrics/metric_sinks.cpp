#include "app/metrics/metric_sinks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>

#include "core/progress.h"
#include "core/check.h"

namespace titan::app {

std::string format_metrics_line(const StepReport& r, int64_t last_step) {
  auto value = [&r](const char* name) {
    const double* v = r.find(name);
    return v ? *v : std::nan("");
  };
  std::string line = fmt::format("{}  loss {:8.4f}", format_step_progress(r.step, last_step),
                                 value("loss"));
  if (const double* val = r.find("val_loss")) line += fmt::format("  val_loss {:8.4f}", *val);
  // A loss over answers only: the targets it was the mean over.
  if (const double* trained = r.find("trained_tokens")) {
    line += fmt::format("  trained {:.0f} tok", *trained);
  }
  line += fmt::format(
      "  grad_norm {:7.4f}  lr {:.3e}  tok/s {:>9.0f} ({:.0f}/device)  "
      "step {:7.1f} ms  mem {:6.3f} GiB",
      value("grad_norm"), value("lr"), value("tokens_per_s"), value("tokens_per_s_per_device"),
      value("step_ms"), value("peak_mem_gib"));
  if (const double* pct = r.find("peak_mem_pct")) line += fmt::format(" ({:.1f}%)", *pct);
  if (const double* wait = r.find("tp_wait_ms")) line += fmt::format("  tp_wait {:.1f} ms", *wait);
  if (const double* wait = r.find("cp_wait_ms")) line += fmt::format("  cp_wait {:.1f} ms", *wait);
  if (const double* wait = r.find("pp_wait_ms")) line += fmt::format("  pp_wait {:.1f} ms", *wait);
  line += fmt::format("  tflops {:7.2f}", value("tflops"));
  if (const double* mfu = r.find("mfu")) line += fmt::format("  mfu {:5.2f}%", *mfu);
  if (const double* elapsed = r.find("elapsed_s")) {
    line += "  elapsed " + format_duration(*elapsed);
  }
  if (const double* eta = r.find("eta_s")) {
    if (r.step < last_step) line += "  eta " + format_duration(*eta);
  }
  if (const double* eval = r.find("eval_s")) line += fmt::format("  eval {:.2f} s", *eval);
  if (const double* skipped = r.find("skipped_steps")) {
    line += fmt::format("  skipped {:.0f}", *skipped);
  }
  return line;
}

std::string format_metrics_json(const StepReport& r) {
  std::string json = fmt::format("{{\"step\": {}", r.step);
  for (const Scalar& s : r.scalars) {
    const bool whole = std::isfinite(s.value) && s.value == std::floor(s.value) &&
                       std::fabs(s.value) < 9007199254740992.0;
    if (whole) {
      json += fmt::format(", \"{}\": {}", s.name, static_cast<int64_t>(s.value));
    } else if (std::isfinite(s.value)) {
      // The shortest text that reads back as the same double: a resumed run's losses can be
      // compared with an uninterrupted run's bit for bit (the chaos test does).
      json += fmt::format(", \"{}\": {}", s.name, s.value);
    } else {
      json += fmt::format(", \"{}\": null", s.name);  // JSON has no NaN or Infinity
    }
  }
  return json + "}";
}

void ConsoleSink::write(const StepReport& report) {
  spdlog::info("{}", format_metrics_line(report, last_step_));
}

JsonlSink::JsonlSink(const std::string& path, bool append) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) {
    input_error("metrics.jsonl: cannot write '", path,
                "'; point it at a writable path or leave it empty");
  }
}

void JsonlSink::write(const StepReport& report) {
  out_ << format_metrics_json(report) << '\n';
  out_.flush();  // a reader (plot_metrics.py, a dashboard) sees each step as it ends
}

void JsonlSink::flush() { out_.flush(); }

}  // namespace titan::app
