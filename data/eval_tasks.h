// Multiple-choice evaluation tasks from local JSON lines files, prompted and scored as
// EleutherAI's lm-evaluation-harness does (docs/evaluation.md): each item is a context and a
// few continuations, one of them right; a model scores each continuation by its summed
// log-likelihood given the context, and the task reports acc (the highest sum is right) and
// acc_norm (the highest sum per UTF-8 byte of the choice is right), each with the standard error
// of its mean.
//
// The formats, told apart by the first line's fields (or named):
//   hellaswag  ctx_a, ctx_b (or ctx), endings, label, activity_label
//   arc        question, choices.text, choices.label, answerKey
//   piqa       goal, sol1, sol2, label
//   mmlu       question, choices, answer (and subject, when present, for the description)
//   plain      context, choices, label: the continuations exactly as given
// Everything here is text and token ids: the model's forward is the caller's
// (data/task_scoring.h takes it as a function).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace titan::data {

enum class TaskFormat { Auto, HellaSwag, Arc, Piqa, Mmlu, Plain };

// "hellaswag", "arc", "piqa", "mmlu", "plain" (and "auto").
const char* task_format_name(TaskFormat format);
// The format named `name`, or nullopt when it names none.
std::optional<TaskFormat> find_task_format(std::string_view name);

// One question: the context and its choices, as the harness prompts them.
struct TaskItem {
  int64_t line = 0;     // 1-based, in its file
  std::string context;  // the prompt
  std::string description;  // the head of `context` a few-shot prompt gives once (MMLU's)
  // The choices' texts; the continuation scored is delimiter + choice, and acc_norm divides by
  // the choice's bytes (the harness's len(choice), for ASCII text).
  std::vector<std::string> choices;
  std::string delimiter;  // " " for the harness's formats, "" for plain
  int64_t label = 0;      // the right choice's index
  std::string continuation(size_t choice) const { return delimiter + choices.at(choice); }
};

struct Task {
  std::string name;  // the file's name without its folder and extension
  std::string path;
  TaskFormat format = TaskFormat::Auto;  // as read: never Auto
  std::vector<TaskItem> items;
};

// The format of a line's fields (Auto when they fit none), for detection.
TaskFormat detect_task_format(std::string_view line);

// Reads `path` in `format` (Auto: the first line's), at most `limit` items (-1: every one).
// InputError naming `flag`, the file, the line number and the field for a line that is not JSON,
// a field missing or of the wrong type, no choices, an empty choice, a label out of range, a
// file with no item; before anything is allocated for a model.
Task read_task(const std::string& path, TaskFormat format, const std::string& flag,
               int64_t limit = -1);

// One entry of a task list: FILE, or FORMAT:FILE when the text before the first ':' names a
// format; read as read_task reads it.
Task read_task_spec(const std::string& spec, const std::string& flag, int64_t limit = -1);

// One line of a task file in `format` (not Auto): the reader's work on one line, which the fuzz
// target and the unit tests call. `where` names the line in messages ("--tasks 'a.jsonl' line 3").
TaskItem parse_task_line(std::string_view line, TaskFormat format, const std::string& where);

// Item `index`'s prompt with `shots` solved examples before it, laid out as the harness lays a
// few-shot prompt: the description once, then each example's question, delimiter and right
// choice, each followed by "\n\n", then the item's question. The examples are other items of the
// same task, drawn without repeats by a generator seeded with `seed` and `index` (so an item's
// examples do not depend on the order items are scored in; the harness draws from a training
// split with Python's random, which this does not reproduce). shots 0: the item's context.
// `shots` must be below the task's item count.
std::string fewshot_context(const Task& task, size_t index, int64_t shots, uint64_t seed);

// The harness's HellaSwag clean-up: trim, " [title]" to ". ", drop every "[...]" (shortest
// match), then each double space to one.
std::string hellaswag_preprocess(std::string_view text);

// The ids the model reads for one choice, split as the harness's _encode_pair: the context's
// trailing whitespace moves to the continuation's front, context + continuation is encoded
// whole, and the continuation is the ids past the context's own encoding. `prefix`: BOS (or
// nothing) before the context; when the context has no ids at all, the harness's prefix token.
struct ChoiceTokens {
  std::vector<int32_t> context;       // prefix + the context's ids
  std::vector<int32_t> continuation;  // what is scored; never empty (InputError)
};
ChoiceTokens encode_choice(const Tokenizer& tokenizer, std::string_view context,
                           std::string_view continuation, std::optional<int32_t> prefix,
                           const std::string& where);

// acc and acc_norm over a task's items from each choice's summed log-likelihood
// (logliks[i][c] for item i's choice c).
struct TaskMetrics {
  int64_t n = 0;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
};
TaskMetrics task_metrics(const std::vector<TaskItem>& items,
                         const std::vector<std::vector<double>>& logliks);
// The harness's choice: the first index of the largest score.
int64_t argmax_first(const std::vector<double>& scores);
// The sample standard error of the mean of n values of 0 and 1 whose mean is p:
// sqrt(p (1 - p) / (n - 1)); NaN for n < 2.
double mean_stderr(double p, int64_t n);

}  // namespace titan::data
