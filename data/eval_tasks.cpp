#include "data/eval_tasks.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/check.h"
#include "core/json_reader.h"

namespace titan::data {

namespace {

struct FormatName {
  TaskFormat format;
  const char* name;
  const char* fields;  // what a line of it holds, for messages
};
constexpr FormatName kFormats[] = {
    {TaskFormat::Auto, "auto", ""},
    {TaskFormat::HellaSwag, "hellaswag", "ctx_a and ctx_b (or ctx), endings, label, activity_label"},
    {TaskFormat::Arc, "arc", "question, choices.text, choices.label, answerKey"},
    {TaskFormat::Piqa, "piqa", "goal, sol1, sol2, label"},
    {TaskFormat::Mmlu, "mmlu", "question, choices, answer"},
    {TaskFormat::Plain, "plain", "context, choices, label"},
};

const FormatName& format_entry(TaskFormat format) {
  for (const FormatName& f : kFormats) {
    if (f.format == format) return f;
  }
  return kFormats[0];
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.strip() for ASCII whitespace.
std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Python's str.capitalize() on ASCII letters: the first upper-case, the rest lower-case. Other
// bytes (UTF-8 sequences) are kept as they are.
std::string capitalize(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (i == 0 && c >= 'a' && c <= 'z') out[i] = static_cast<char>(c - 'a' + 'A');
    if (i > 0 && c >= 'A' && c <= 'Z') out[i] = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Python's str.replace: every non-overlapping `from`, left to right, in one pass.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  while (true) {
    const size_t at = s.find(from, i);
    if (at == std::string_view::npos) break;
    out.append(s.substr(i, at - i));
    out.append(to);
    i = at + from.size();
  }
  out.append(s.substr(i));
  return out;
}

// The typed access of one line's fields, failing with "<where>: field "<key>" <what>; <fix>".
class LineFields {
 public:
  LineFields(JsonObject object, const std::string& where, TaskFormat format)
      : object_(object), where_(where), format_(format) {}

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    const char* name = format_entry(format_).name;
    input_error(where_, ": field \"", field, "\" ", what, name[0] == 'a' ? "; an " : "; a ", name,
                " item holds ", format_entry(format_).fields);
  }
  bool has(std::string_view key) const { return object_.find(key).has_value(); }
  JsonValue value(std::string_view key) const {
    const std::optional<JsonValue> v = object_.find(key);
    if (!v) fail(key, "is missing");
    return *v;
  }
  std::string_view string(std::string_view key) const { return string_of(value(key), key); }
  std::string_view string_of(JsonValue v, std::string_view field) const {
    const std::optional<std::string_view> s = v.get_string();
    if (!s) fail(field, detail::concat("is ", v.type_name(), ", not a string"));
    return *s;
  }
  std::vector<std::string> strings(JsonValue v, std::string_view field) const {
    const std::optional<JsonArray> array = v.get_array();
    if (!array) fail(field, detail::concat("is ", v.type_name(), ", not an array of strings"));
    std::vector<std::string> out;
    size_t i = 0;
    for (JsonValue item : *array) {
      out.emplace_back(string_of(item, json_index_path(field, i++)));
    }
    return out;
  }
  // An integer label, or a string of one (HellaSwag's "label": "2"), in [0, count).
  int64_t label(std::string_view key, size_t count) const {
    const JsonValue v = value(key);
    std::optional<int64_t> n = v.get_int64();
    if (!n) {
      if (const std::optional<std::string_view> s = v.get_string()) {
        // At most 9 digits, so that the sum cannot overflow; anything else is no label.
        int64_t parsed = 0;
        bool digits = !s->empty() && s->size() < 10;
        for (size_t i = 0; digits && i < s->size(); ++i) {
          const char c = (*s)[i];
          digits = c >= '0' && c <= '9';
          parsed = parsed * 10 + (c - '0');
        }
        if (digits) n = parsed;
      }
    }
    if (!n) fail(key, detail::concat("is ", v.type_name(), ", not the index of a choice"));
    if (*n < 0 || *n >= static_cast<int64_t>(count)) {
      fail(key, detail::concat(*n, " is out of range: the item has ", count,
                               " choices, indexed 0 to ", count - 1));
    }
    return *n;
  }

 private:
  JsonObject object_;
  const std::string& where_;
  TaskFormat format_;
};

// Refuses no choices and an empty choice: acc_norm divides by a choice's length.
void check_choices(const LineFields& fields, const std::vector<std::string>& choices,
                   std::string_view field) {
  if (choices.empty()) fields.fail(field, "holds no choice; an item needs at least one");
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) {
      fields.fail(json_index_path(field, i),
                  "is empty: a continuation needs text (acc_norm divides by its length)");
    }
  }
}

TaskItem parse_hellaswag(const LineFields& f) {
  std::string ctx;
  if (f.has("ctx_a") || f.has("ctx_b")) {
    ctx = std::string(f.string("ctx_a")) + " " + capitalize(f.string("ctx_b"));
  } else {
    ctx = std::string(f.string("ctx"));
  }
  TaskItem item;
  item.context = hellaswag_preprocess(std::string(f.string("activity_label")) + ": " + ctx);
  for (const std::string& ending : f.strings(f.value("endings"), "endings")) {
    item.choices.push_back(hellaswag_preprocess(ending));
  }
  check_choices(f, item.choices, "endings");
  item.delimiter = " ";
  item.label = f.label("label", item.choices.size());
  return item;
}

TaskItem parse_arc(const LineFields& f) {
  const JsonValue choices = f.value("choices");
  const std::optional<JsonObject> object = choices.get_object();
  if (!object) {
    f.fail("choices", detail::concat("is ", choices.type_name(), ", not an object of text and label"));
  }
  const std::optional<JsonValue> text = object->find("text");
  const std::optional<JsonValue> labels = object->find("label");
  if (!text) f.fail("choices.text", "is missing");
  if (!labels) f.fail("choices.label", "is missing");
  TaskItem item;
  item.context = "Question: " + std::string(f.string("question")) + "\nAnswer:";
  item.choices = f.strings(*text, "choices.text");
  check_choices(f, item.choices, "choices.text");
  const std::vector<std::string> keys = f.strings(*labels, "choices.label");
  if (keys.size() != item.choices.size()) {
    f.fail("choices.label", detail::concat("holds ", keys.size(), " labels for ",
                                           item.choices.size(), " texts; give one per text"));
  }
  const std::string_view answer = f.string("answerKey");
  item.label = -1;
  for (size_t i = 0; i < keys.size() && item.label < 0; ++i) {
    if (keys[i] == answer) item.label = static_cast<int64_t>(i);
  }
  if (item.label < 0) {
    std::string all;
    for (const std::string& k : keys) all += (all.empty() ? "" : ", ") + k;
    f.fail("answerKey",
           detail::concat("'", answer, "' is not among choices.label (", all, ")"));
  }
  item.delimiter = " ";
  return item;
}

TaskItem parse_piqa(const LineFields& f) {
  TaskItem item;
  item.context = "Question: " + std::string(f.string("goal")) + "\nAnswer:";
  item.choices = {std::string(f.string("sol1")), std::string(f.string("sol2"))};
  if (item.choices[0].empty()) f.fail("sol1", "is empty: a continuation needs text");
  if (item.choices[1].empty()) f.fail("sol2", "is empty: a continuation needs text");
  item.delimiter = " ";
  item.label = f.label("label", 2);
  return item;
}

TaskItem parse_mmlu(const LineFields& f) {
  const std::vector<std::string> options = f.strings(f.value("choices"), "choices");
  check_choices(f, options, "choices");
  if (options.size() > 26) {
    f.fail("choices", detail::concat("holds ", options.size(),
                                     " choices, more than the letters A to Z can name"));
  }
  TaskItem item;
  if (f.has("subject")) {
    // The harness's per-subject description, before the question.
    item.description = "The following are multiple choice questions (with answers) about " +
                       replace_all(f.string("subject"), "_", " ") + ".\n\n";
    item.context = item.description;
  }
  item.context += std::string(strip(f.string("question")));
  for (size_t i = 0; i < options.size(); ++i) {
    const std::string letter(1, static_cast<char>('A' + i));
    item.context += "\n" + letter + ". " + options[i];
    item.choices.push_back(letter);
  }
  item.context += "\nAnswer:";
  item.delimiter = " ";
  // cais/mmlu's answer is the index; a letter ("B") is taken too.
  const JsonValue answer = f.value("answer");
  const std::optional<std::string_view> letter = answer.get_string();
  if (letter && letter->size() == 1 && (*letter)[0] >= 'A' && (*letter)[0] <= 'Z') {
    item.label = (*letter)[0] - 'A';
    if (item.label >= static_cast<int64_t>(options.size())) {
      f.fail("answer", detail::concat("'", *letter, "' is out of range: the item has ",
                                      options.size(), " choices"));
    }
  } else {
    item.label = f.label("answer", options.size());
  }
  return item;
}

TaskItem parse_plain(const LineFields& f) {
  TaskItem item;
  item.context = std::string(f.string("context"));
  item.choices = f.strings(f.value("choices"), "choices");
  check_choices(f, item.choices, "choices");
  item.label = f.label("label", item.choices.size());
  return item;
}

}  // namespace

const char* task_format_name(TaskFormat format) { return format_entry(format).name; }

std::optional<TaskFormat> find_task_format(std::string_view name) {
  for (const FormatName& f : kFormats) {
    if (name == f.name) return f.format;
  }
  return std::nullopt;
}

TaskFormat detect_task_format(std::string_view line) {
  JsonDocument document;
  if (!document.parse(line)) return TaskFormat::Auto;
  const std::optional<JsonObject> o = document.root().get_object();
  if (!o) return TaskFormat::Auto;
  auto has = [&](std::string_view key) { return o->find(key).has_value(); };
  if (has("endings")) return TaskFormat::HellaSwag;
  if (has("answerKey")) return TaskFormat::Arc;
  if (has("goal") || has("sol1")) return TaskFormat::Piqa;
  if (has("question") && has("answer")) return TaskFormat::Mmlu;
  if (has("context")) return TaskFormat::Plain;
  return TaskFormat::Auto;
}

std::string hellaswag_preprocess(std::string_view text) {
  std::string s = replace_all(strip(text), " [title]", ". ");
  // re.sub(r"\[.*?\]", "", s): '.' stops at a newline, so a '[' whose ']' lies past one stays.
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      const size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return replace_all(out, "  ", " ");
}

TaskItem parse_task_line(std::string_view line, TaskFormat format, const std::string& where) {
  TT_CHECK(format != TaskFormat::Auto, "parse_task_line: a format, not auto");
  JsonDocument document;
  if (!document.parse(line)) {
    input_error(where, ": not JSON (", document.error_phrase(),
                "); each line must be one JSON object, a task item");
  }
  const std::optional<JsonObject> object = document.root().get_object();
  if (!object) {
    input_error(where, ": is ", document.root().type_name(),
                ", not a JSON object; each line must be one task item");
  }
  const LineFields fields(*object, where, format);
  switch (format) {
    case TaskFormat::HellaSwag: return parse_hellaswag(fields);
    case TaskFormat::Arc: return parse_arc(fields);
    case TaskFormat::Piqa: return parse_piqa(fields);
    case TaskFormat::Mmlu: return parse_mmlu(fields);
    case TaskFormat::Plain: return parse_plain(fields);
    case TaskFormat::Auto: break;
  }
  TT_CHECK(false, "parse_task_line: unknown format");
}

Task read_task_spec(const std::string& spec, const std::string& flag, int64_t limit) {
  TaskFormat format = TaskFormat::Auto;
  std::string path = spec;
  if (const size_t colon = spec.find(':'); colon != std::string::npos) {
    if (const auto named = find_task_format(spec.substr(0, colon))) {
      format = *named;
      path = spec.substr(colon + 1);
    }
  }
  return read_task(path, format, flag, limit);
}

Task read_task(const std::string& path, TaskFormat format, const std::string& flag,
               int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    input_error(flag, ": cannot read '", path, "'; name a JSON lines file of task items");
  }
  Task task;
  task.path = path;
  task.name = std::filesystem::path(path).stem().string();
  task.format = format;
  std::string line;
  int64_t number = 0;
  while ((limit < 0 || static_cast<int64_t>(task.items.size()) < limit) &&
         std::getline(in, line)) {
    ++number;
    if (strip(line).empty()) continue;
    const std::string where = detail::concat(flag, " '", path, "' line ", number);
    if (task.format == TaskFormat::Auto) {
      task.format = detect_task_format(line);
      if (task.format == TaskFormat::Auto) {
        // Not JSON at all is said as such by the parse below.
        JsonDocument probe;
        if (!probe.parse(line)) parse_task_line(line, TaskFormat::Plain, where);
        input_error(where,
                    ": its fields fit no task format (hellaswag: endings; arc: answerKey; piqa: "
                    "goal, sol1; mmlu: question, answer; plain: context, choices, label); fix "
                    "the line, or name the format (FORMAT:FILE)");
      }
    }
    TaskItem item = parse_task_line(line, task.format, where);
    item.line = number;
    task.items.push_back(std::move(item));
  }
  if (task.items.empty()) {
    input_error(flag, " '", path, "' holds no item (no line that is not empty)",
                limit == 0 ? " within --limit 0" : "", "; give a JSON lines file of task items");
  }
  return task;
}

std::string fewshot_context(const Task& task, size_t index, int64_t shots, uint64_t seed) {
  const TaskItem& item = task.items.at(index);
  if (shots == 0) return item.context;
  TT_CHECK(shots > 0 && static_cast<size_t>(shots) < task.items.size(), "fewshot_context: ",
           shots, " examples from a task of ", task.items.size(), " items");
  // splitmix64 over (seed, index): each item's own draw.
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + index;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<size_t> chosen;
  while (static_cast<int64_t>(chosen.size()) < shots) {
    const size_t pick = static_cast<size_t>(next() % task.items.size());
    if (pick == index || std::find(chosen.begin(), chosen.end(), pick) != chosen.end()) continue;
    chosen.push_back(pick);
  }
  std::string out = item.description;
  for (size_t pick : chosen) {
    const TaskItem& example = task.items[pick];
    out += example.context.substr(example.description.size());
    out += example.continuation(static_cast<size_t>(example.label));
    out += "\n\n";
  }
  out += item.context.substr(item.description.size());
  return out;
}

ChoiceTokens encode_choice(const Tokenizer& tokenizer, std::string_view context,
                           std::string_view continuation, std::optional<int32_t> prefix,
                           const std::string& where) {
  // The harness moves the context's trailing whitespace onto the continuation, so that the
  // space before a word is tokenized with the word, as in running text.
  size_t keep = context.size();
  while (keep > 0 && is_space(context[keep - 1])) --keep;
  const std::string ctx(context.substr(0, keep));
  const std::string cont = std::string(context.substr(keep)) + std::string(continuation);
  ChoiceTokens out;
  if (prefix) out.context.push_back(*prefix);
  if (ctx.empty()) {
    out.continuation = tokenizer.encode(cont);
  } else {
    const std::vector<int32_t> whole = tokenizer.encode(ctx + cont);
    const std::vector<int32_t> own = tokenizer.encode(ctx);
    out.context.insert(out.context.end(), own.begin(), own.end());
    if (whole.size() > own.size()) out.continuation.assign(whole.begin() + own.size(), whole.end());
  }
  if (out.continuation.empty()) {
    input_error(where, ": the continuation '", continuation,
                "' has no token of its own past the context's; give it text");
  }
  if (out.context.empty()) {
    input_error(where,
                ": the context is empty and the tokenizer has no BOS to stand for it; give the "
                "item a context, or use a tokenizer with a BOS token");
  }
  return out;
}

int64_t argmax_first(const std::vector<double>& scores) {
  int64_t best = 0;
  for (size_t i = 1; i < scores.size(); ++i) {
    if (scores[i] > scores[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best;
}

double mean_stderr(double p, int64_t n) {
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  return std::sqrt(p * (1 - p) / static_cast<double>(n - 1));
}

TaskMetrics task_metrics(const std::vector<TaskItem>& items,
                         const std::vector<std::vector<double>>& logliks) {
  TT_CHECK(items.size() == logliks.size(), "task_metrics: ", items.size(), " items but ",
           logliks.size(), " score lists");
  TaskMetrics m;
  m.n = static_cast<int64_t>(items.size());
  int64_t right = 0, right_norm = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const TaskItem& item = items[i];
    TT_CHECK(logliks[i].size() == item.choices.size(), "task_metrics: item ", i, " has ",
             item.choices.size(), " choices but ", logliks[i].size(), " scores");
    std::vector<double> per_byte(item.choices.size());
    for (size_t c = 0; c < item.choices.size(); ++c) {
      per_byte[c] = logliks[i][c] / static_cast<double>(item.choices[c].size());
    }
    right += argmax_first(logliks[i]) == item.label;
    right_norm += argmax_first(per_byte) == item.label;
  }
  if (m.n > 0) {
    m.acc = static_cast<double>(right) / static_cast<double>(m.n);
    m.acc_norm = static_cast<double>(right_norm) / static_cast<double>(m.n);
  }
  m.acc_stderr = mean_stderr(m.acc, m.n);
  m.acc_norm_stderr = mean_stderr(m.acc_norm, m.n);
  return m;
}

}  // namespace titan::data
