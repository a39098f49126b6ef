// Fuzz target: a multiple-choice task file (data/eval_tasks.h: read_task), as titan_generate
// --tasks reads one, in every format.
//
// The first input byte picks the format (auto, hellaswag, arc, piqa, mmlu, plain) and a --limit
// (-1, 1 or 3); the rest is the file.
//
// Contract: read_task returns a task or throws InputError. A task read holds at least one item
// and at most --limit; its format is never auto; items' line numbers rise; every item has a
// choice, no empty choice, and a label among its choices.
#include <string>

#include "data/eval_tasks.h"
#include "fuzz/fuzz_support.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const data::TaskFormat kFormats[] = {
      data::TaskFormat::Auto, data::TaskFormat::HellaSwag, data::TaskFormat::Arc,
      data::TaskFormat::Piqa, data::TaskFormat::Mmlu,      data::TaskFormat::Plain};
  static const int64_t kLimits[] = {-1, 1, 3};
  const unsigned choice = data[0];
  const data::TaskFormat format = kFormats[choice % 6];
  const int64_t limit = kLimits[(choice / 6) % 3];
  const std::string path = fuzz::write_scratch_file("task.jsonl", data + 1, size - 1);
  data::Task task;
  if (!fuzz::fuzz_reads("read_task", [&] { task = data::read_task(path, format, "--tasks", limit); })) {
    return 0;
  }
  FUZZ_REQUIRE(!task.items.empty(), "read_task", "returned a task with no item");
  FUZZ_REQUIRE(limit < 0 || static_cast<int64_t>(task.items.size()) <= limit, "read_task",
               "returned more items than --limit");
  FUZZ_REQUIRE(task.format != data::TaskFormat::Auto, "read_task", "left the format auto");
  int64_t line = 0;
  for (const data::TaskItem& item : task.items) {
    FUZZ_REQUIRE(item.line > line, "read_task", "line numbers do not rise");
    line = item.line;
    FUZZ_REQUIRE(!item.choices.empty(), "read_task", "an item with no choice");
    for (const std::string& c : item.choices) {
      FUZZ_REQUIRE(!c.empty(), "read_task", "an empty choice");
    }
    FUZZ_REQUIRE(item.label >= 0 && item.label < static_cast<int64_t>(item.choices.size()),
                 "read_task", "a label outside the choices");
  }
  return 0;
}
