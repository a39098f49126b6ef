#include "tools/generate/records.h"

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

std::string task_record(const TaskResult& result, const std::string& model,
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

std::string task_item_record(const TaskResult& result, size_t item) {
  const data::TaskItem& it = result.task->items.at(item);
  std::string out = "{\"task\": ";
  append_json_string(out, result.task->name);
  out += ", \"line\": " + std::to_string(it.line) + ", \"label\": " + std::to_string(it.label);
  out += ", \"loglik\": [";
  for (size_t c = 0; c < it.choices.size(); ++c) {
    out += (c > 0 ? ", " : "") + number(result.logliks[item][c]);
  }
  out += "], \"continuation_tokens\": [";
  for (size_t c = 0; c < it.choices.size(); ++c) {
    out += (c > 0 ? ", " : "") + std::to_string(result.continuation_tokens[item][c]);
  }
  out += "], \"choice_bytes\": [";
  for (size_t c = 0; c < it.choices.size(); ++c) {
    out += (c > 0 ? ", " : "") + std::to_string(it.choices[c].size());
  }
  out += "]}";
  return out;
}

const char* build_commit() { return TITAN_GENERATE_COMMIT; }

}  // namespace titan::generate
