#include "tools/generate/records.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/json_text.h"

namespace titan::generate {

namespace {

std::string number(double value) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN or Infinity
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += ']';
}

}  // namespace

std::string completion_record(const Prompt& prompt, const Completion& c) {
  std::string out = "{\"index\": " + std::to_string(prompt.index) + ", \"prompt\": ";
  append_json_string(out, prompt.text);
  out += ", \"completion\": ";
  append_json_string(out, c.text);
  out += ", \"prompt_ids\": ";
  append_ids(out, prompt.ids);
  out += ", \"completion_ids\": ";
  append_ids(out, c.ids);
  out += ", \"finish_reason\": ";
  append_json_string(out, c.finish_reason);
  const double decoded = static_cast<double>(c.ids.size()) - 1;  // the first came from prefill
  out += ", \"prompt_tokens\": " + std::to_string(prompt.ids.size()) +
         ", \"completion_tokens\": " + std::to_string(c.ids.size()) +
         ", \"prefill_seconds\": " + number(c.prefill_seconds) +
         ", \"decode_seconds\": " + number(c.decode_seconds) + ", \"decode_tokens_per_second\": " +
         number(c.decode_seconds > 0 ? decoded / c.decode_seconds : 0.0) + "}";
  return out;
}

std::string eval_record(const std::string& path, const EvalResult& r) {
  std::string out = "{\"eval\": ";
  append_json_string(out, path);
  out += ", \"loss\": " + number(r.loss) + ", \"perplexity\": " + number(std::exp(r.loss)) +
         ", \"batches\": " + std::to_string(r.batches) +
         ", \"batch_size\": " + std::to_string(r.batch_size) +
         ", \"seq_len\": " + std::to_string(r.seq_len) +
         ", \"tokens\": " + std::to_string(r.batches * r.batch_size * r.seq_len) +
         ", \"seconds\": " + number(r.seconds) + "}";
  return out;
}

std::string task_record(const data::TaskResult& result, const std::string& model,
                        const std::string& tokenizer) {
  const data::TaskMetrics& m = result.metrics;
  std::string out = "{\"task\": ";
  append_json_string(out, result.task->name);
  out += ", \"path\": ";
  append_json_string(out, result.task->path);
  out += ", \"format\": ";
  append_json_string(out, data::task_format_name(result.task->format));
  out += ", \"n\": " + std::to_string(m.n) + ", \"acc\": " + number(m.acc) +
         ", \"acc_stderr\": " + number(m.acc_stderr) + ", \"acc_norm\": " + number(m.acc_norm) +
         ", \"acc_norm_stderr\": " + number(m.acc_norm_stderr) +
         ", \"num_fewshot\": " + std::to_string(result.shots) + ", \"model\": ";
  append_json_string(out, model);
  out += ", \"tokenizer\": ";
  append_json_string(out, tokenizer);
  out += ", \"commit\": ";
  append_json_string(out, build_commit());
  out += "}";
  return out;
}

std::string task_table(const std::vector<data::TaskResult>& results) {
  size_t width = 4;
  for (const data::TaskResult& r : results) width = std::max(width, r.task->name.size());
  auto row = [&](const std::string& name, const std::string& rest) {
    std::string line = name;
    line.resize(width, ' ');
    return line + rest + "\n";
  };
  char buffer[160];
  std::snprintf(buffer, sizeof(buffer), " %7s %8s %8s %9s %8s", "n", "acc", "stderr",
                "acc_norm", "stderr");
  std::string out = row("task", buffer);
  for (const data::TaskResult& r : results) {
    const data::TaskMetrics& m = r.metrics;
    std::snprintf(buffer, sizeof(buffer), " %7lld %8.4f ±%7.4f %9.4f ±%7.4f",
                  static_cast<long long>(m.n), m.acc, m.acc_stderr, m.acc_norm,
                  m.acc_norm_stderr);
    out += row(r.task->name, buffer);
  }
  return out;
}

const char* build_commit() { return TITAN_GENERATE_COMMIT; }

}  // namespace titan::generate
