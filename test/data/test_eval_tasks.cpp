// Multiple-choice task files (data/eval_tasks.h): each format's prompt and continuations as
// lm-evaluation-harness builds them, detection from the fields, the harness's split of a
// choice's tokens, acc/acc_norm and their standard errors, and each hostile line refused with
// the file, the line number and the field.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/byte_tokenizer.h"
#include "data/eval_tasks.h"
#include "support/process.h"

namespace titan::data {
namespace {

std::string write_task(const std::string& name, const std::string& text) {
  const std::string dir = titan::testing::scratch_dir("eval_tasks");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The InputError's message of reading `text` as a task file (in `format`).
std::string refusal(const std::string& text, TaskFormat format = TaskFormat::Auto) {
  const std::string path = write_task("hostile.jsonl", text);
  try {
    read_task(path, format, "--tasks");
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("read_task accepted ", text);
  return "";
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("eval tasks: hellaswag's query and endings go through the harness's preprocess") {
    CHECK(hellaswag_preprocess("  Roof [title] How to fix [header] it  ") ==
          "Roof. How to fix it");
    // '.' of \[.*?\] stops at a newline: this bracket stays.
    CHECK(hellaswag_preprocess("a [b\nc] d") == "a [b\nc] d");
    // One pass of replace("  ", " "): three spaces become two.
    CHECK(hellaswag_preprocess("a   b") == "a  b");
    const std::string path = write_task(
        "hellaswag.jsonl",
        R"({"activity_label": "Roof shingle removal", "ctx_a": "A man is on a roof.", "ctx_b": "HE )"
        R"(is", "ctx": "unused", "endings": ["rips [step] tiles off.", "sings."], "label": "1"})"
        "\n");
    const Task task = read_task(path, TaskFormat::Auto, "--tasks");
    CHECK(task.format == TaskFormat::HellaSwag);
    CHECK(task.name == "hellaswag");
    REQUIRE(task.items.size() == 1);
    const TaskItem& item = task.items[0];
    // ctx_b.capitalize() lower-cases all but its first letter.
    CHECK(item.context == "Roof shingle removal: A man is on a roof. He is");
    CHECK(item.choices == std::vector<std::string>{"rips tiles off.", "sings."});
    CHECK(item.continuation(0) == " rips tiles off.");
    CHECK(item.label == 1);
    CHECK(item.line == 1);
  }

  TEST_CASE("eval tasks: the arc and piqa and mmlu and plain prompts") {
    const TaskItem arc = parse_task_line(
        R"({"question": "Which is a metal?", "choices": {"text": ["wood", "iron"], "label": ["A", "B"]}, "answerKey": "B"})",
        TaskFormat::Arc, "arc");
    CHECK(arc.context == "Question: Which is a metal?\nAnswer:");
    CHECK(arc.continuation(1) == " iron");
    CHECK(arc.label == 1);

    const TaskItem piqa = parse_task_line(
        R"({"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat it", "label": 0})",
        TaskFormat::Piqa, "piqa");
    CHECK(piqa.context == "Question: Open a jar\nAnswer:");
    CHECK(piqa.choices == std::vector<std::string>{"twist the lid", "eat it"});
    CHECK(piqa.label == 0);

    const TaskItem mmlu = parse_task_line(
        R"({"question": " What is 2+2? ", "subject": "high_school_math", "choices": ["1", "4", "3", "5"], "answer": 1})",
        TaskFormat::Mmlu, "mmlu");
    CHECK(mmlu.context ==
          "The following are multiple choice questions (with answers) about high school "
          "math.\n\nWhat is 2+2?\nA. 1\nB. 4\nC. 3\nD. 5\nAnswer:");
    CHECK(mmlu.continuation(3) == " D");
    CHECK(mmlu.label == 1);
    const TaskItem letter = parse_task_line(
        R"({"question": "q", "choices": ["x", "y"], "answer": "B"})", TaskFormat::Mmlu, "mmlu");
    CHECK(letter.context == "q\nA. x\nB. y\nAnswer:");
    CHECK(letter.label == 1);

    const TaskItem plain = parse_task_line(
        R"({"context": "In the beginning", "choices": [" God", " dog"], "label": 0})",
        TaskFormat::Plain, "plain");
    CHECK(plain.context == "In the beginning");
    CHECK(plain.continuation(0) == " God");  // as given: no delimiter added
    CHECK(plain.delimiter.empty());
  }

  TEST_CASE("eval tasks: the format is read from the first line's fields") {
    CHECK(detect_task_format(R"({"ctx": "a", "endings": []})") == TaskFormat::HellaSwag);
    CHECK(detect_task_format(R"({"question": "a", "answerKey": "A"})") == TaskFormat::Arc);
    CHECK(detect_task_format(R"({"goal": "a", "sol1": "b"})") == TaskFormat::Piqa);
    CHECK(detect_task_format(R"({"question": "a", "answer": 0})") == TaskFormat::Mmlu);
    CHECK(detect_task_format(R"({"context": "a"})") == TaskFormat::Plain);
    CHECK(detect_task_format(R"({"text": "a"})") == TaskFormat::Auto);
    CHECK(find_task_format("piqa") == TaskFormat::Piqa);
    CHECK_FALSE(find_task_format("boolq").has_value());
    // --limit, and blank lines skipped but counted.
    const std::string path =
        write_task("plain.jsonl",
                   "\n{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}\n"
                   "{\"context\": \"c\", \"choices\": [\"d\", \"e\"], \"label\": 1}\n"
                   "{\"context\": \"f\", \"choices\": [\"g\"], \"label\": 0}\n");
    const Task two = read_task(path, TaskFormat::Auto, "--tasks", 2);
    REQUIRE(two.items.size() == 2);
    CHECK(two.items[1].line == 3);
    CHECK(read_task(path, TaskFormat::Plain, "--tasks").items.size() == 3);
  }

  TEST_CASE("eval tasks: hostile lines name the file and the line and the field") {
    const std::string good = "{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}\n";
    std::string e = refusal(good + "{\"context\": \"a\", \"choices\": [\"b\"\n");
    CHECK(e.find("hostile.jsonl' line 2: not JSON") != std::string::npos);
    e = refusal(good + "{\"context\": \"a\", \"label\": 0}\n");
    CHECK(e.find("line 2: field \"choices\" is missing; a plain item holds context, choices, "
                 "label") != std::string::npos);
    e = refusal("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 2}\n");
    CHECK(e.find("line 1: field \"label\" 2 is out of range: the item has 2 choices") !=
          std::string::npos);
    e = refusal("{\"context\": \"a\", \"choices\": [], \"label\": 0}\n");
    CHECK(e.find("field \"choices\" holds no choice") != std::string::npos);
    e = refusal("{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"label\": 0}\n");
    CHECK(e.find("field \"choices[1]\" is empty: a continuation needs text") != std::string::npos);
    e = refusal("{\"goal\": \"a\", \"sol1\": \"b\", \"sol2\": \"c\", \"label\": -1}\n");
    CHECK(e.find("field \"label\" -1 is out of range") != std::string::npos);
    e = refusal("{\"goal\": \"a\", \"sol1\": \"b\", \"sol2\": 3, \"label\": 0}\n");
    CHECK(e.find("field \"sol2\" is a number, not a string") != std::string::npos);
    e = refusal(
        "{\"question\": \"q\", \"choices\": {\"text\": [\"a\"], \"label\": [\"A\"]}, "
        "\"answerKey\": \"E\"}\n");
    CHECK(e.find("field \"answerKey\" 'E' is not among choices.label (A)") != std::string::npos);
    e = refusal("{\"activity_label\": \"x\", \"ctx\": \"c\", \"endings\": [\"e\"], \"label\": "
                "\"one\"}\n");
    CHECK(e.find("field \"label\" is a string, not the index of a choice") != std::string::npos);
    // Twenty digits: no int64, and no overflow reading it (UBSan's find).
    e = refusal("{\"activity_label\": \"x\", \"ctx\": \"c\", \"endings\": [\"e\"], \"label\": "
                "\"32222222222222222219\"}\n");
    CHECK(e.find("field \"label\" is a string, not the index of a choice") != std::string::npos);
    e = refusal("{\"text\": \"a\"}\n");
    CHECK(e.find("line 1: its fields fit no task format") != std::string::npos);
    e = refusal("[1, 2]\n", TaskFormat::Plain);
    CHECK(e.find("line 1: is an array, not a JSON object") != std::string::npos);
    e = refusal("\n\n");
    CHECK(e.find("holds no item") != std::string::npos);
    e = refusal("not json at all\n");
    CHECK(e.find("line 1: not JSON") != std::string::npos);
    CHECK_THROWS_AS(read_task("/nonexistent/task.jsonl", TaskFormat::Auto, "--tasks"), InputError);
  }

  TEST_CASE("eval tasks: a few-shot prompt is the description once and other items solved") {
    Task task;
    for (int i = 0; i < 5; ++i) {
      TaskItem item;
      item.description = "About things.\n\n";
      item.context = item.description + "Q" + std::to_string(i) + "\nAnswer:";
      item.choices = {"no" + std::to_string(i), "yes" + std::to_string(i)};
      item.delimiter = " ";
      item.label = 1;
      task.items.push_back(item);
    }
    CHECK(fewshot_context(task, 2, 0, 1) == task.items[2].context);
    const std::string prompt = fewshot_context(task, 2, 3, 1234);
    CHECK(prompt == fewshot_context(task, 2, 3, 1234));  // the same draw every time
    CHECK(prompt.starts_with("About things.\n\nQ"));
    CHECK(prompt.find("About things.", 1) == std::string::npos);  // the description once
    CHECK(prompt.ends_with("\n\nQ2\nAnswer:"));
    CHECK(prompt.find("Q2\nAnswer: yes2") == std::string::npos);  // never the item itself
    int examples = 0;
    for (int i = 0; i < 5; ++i) {
      const std::string solved = "Q" + std::to_string(i) + "\nAnswer: yes" + std::to_string(i) +
                                 "\n\n";
      if (prompt.find(solved) != std::string::npos) ++examples;
    }
    CHECK(examples == 3);
    // Every other item, in some order, when the examples are all of them.
    const std::string all = fewshot_context(task, 0, 4, 9);
    for (int i = 1; i < 5; ++i) {
      CHECK(all.find("Q" + std::to_string(i) + "\nAnswer: yes" + std::to_string(i) + "\n\n") !=
            std::string::npos);
    }
  }

  TEST_CASE("eval tasks: a choice's tokens split as the harness's _encode_pair") {
    const ByteTokenizer bytes;
    // The context's trailing space moves to the continuation.
    const ChoiceTokens t = encode_choice(bytes, "ab ", "c", ByteTokenizer::kBos, "item");
    CHECK(t.context == std::vector<int32_t>{ByteTokenizer::kBos, 'a', 'b'});
    CHECK(t.continuation == std::vector<int32_t>{' ', 'c'});
    const ChoiceTokens no_bos = encode_choice(bytes, "ab", " c", std::nullopt, "item");
    CHECK(no_bos.context == std::vector<int32_t>{'a', 'b'});
    CHECK(no_bos.continuation == std::vector<int32_t>{' ', 'c'});
    // An empty context is the prefix alone; without one there is nothing to condition on.
    CHECK(encode_choice(bytes, "", "x", ByteTokenizer::kBos, "item").context ==
          std::vector<int32_t>{ByteTokenizer::kBos});
    CHECK_THROWS_AS(encode_choice(bytes, "", "x", std::nullopt, "item"), InputError);
    CHECK_THROWS_AS(encode_choice(bytes, "a", "", ByteTokenizer::kBos, "item"), InputError);
  }

  TEST_CASE("eval tasks: acc and acc_norm and their standard errors") {
    std::vector<TaskItem> items(3);
    items[0].choices = {"a", "bbbb"};  // bytes 1, 4
    items[0].label = 1;
    items[1].choices = {"a", "b"};
    items[1].label = 0;
    items[2].choices = {"aa", "b"};
    items[2].label = 0;
    // Item 0: the sum prefers choice 0 (-2 > -4), per byte choice 1 (-1 > -2).
    // Item 1: a tie goes to the first, right under both.
    // Item 2: sum prefers 0 (-3 > -3.5), per byte 0 (-1.5 > -3.5).
    const std::vector<std::vector<double>> ll = {{-2, -4}, {-1, -1}, {-3, -3.5}};
    const TaskMetrics m = task_metrics(items, ll);
    CHECK(m.n == 3);
    CHECK(m.acc == doctest::Approx(2.0 / 3));
    CHECK(m.acc_norm == doctest::Approx(1.0));
    CHECK(m.acc_stderr == doctest::Approx(std::sqrt((2.0 / 3) * (1.0 / 3) / 2)));
    CHECK(m.acc_norm_stderr == 0);
    CHECK(argmax_first({1, 3, 3}) == 1);
    CHECK(std::isnan(mean_stderr(1.0, 1)));
  }
}

}  // namespace titan::data
