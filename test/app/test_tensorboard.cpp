// TensorBoard event files: ISA-L's CRC32C is the standard one, a TFRecord is framed byte for
// byte as TensorFlow frames it, an Event carries TensorFlow's field numbers (hand-encoded here
// from event.proto / summary.proto / tensor.proto, not from our .proto), and an independent
// Python reader (test/app/read_tfevents.py: Debian's python3-protobuf and python3-crc32c, no
// code of ours) accepts every record's CRCs and reads back each scalar and text.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "app/metrics/tensorboard/event_file_writer.h"
#include "app/metrics/tensorboard/tensorboard_sink.h"
#include "core/check.h"
#include "support/process.h"

using namespace titan;
using namespace titan::app;
using titan::testing::read_file;

namespace {

// Debian's interpreter, where apt installs python3-protobuf and python3-crc32c (a python3
// earlier on PATH, e.g. pyenv's, may lack them).
constexpr const char* kPython = "/usr/bin/python3";

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// A fresh, empty folder for one test's event files.
std::string fresh_folder(const std::string& name) {
  std::string folder = testing::scratch_dir("tensorboard") + "/" + name;
  std::filesystem::remove_all(folder);
  return folder;
}

// The data of each record, trusting the lengths (the framing has its own test).
std::vector<std::string> record_data(const std::string& file) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 12 <= file.size()) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(file[at + i]);
    out.push_back(file.substr(at + 12, length));
    at += 12 + length + 4;
  }
  return out;
}

// One line of read_tfevents.py: {"step": N, "tag": "...", "value": X} or "text": "...".
struct ReaderLine {
  int64_t step = -1;
  std::string tag;
  std::optional<double> value;
  std::optional<std::string> text;
};

// A JSON string starting at s[at] == '"'; `at` ends past the closing quote. Python's
// json.dumps(ensure_ascii=False) escapes only quotes, backslashes and control characters.
std::string json_string(const std::string& s, size_t& at) {
  REQUIRE(s.at(at) == '"');
  std::string out;
  for (++at; s.at(at) != '"'; ++at) {
    if (s[at] != '\\') {
      out += s[at];
      continue;
    }
    const char e = s.at(++at);
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        const int code = std::stoi(s.substr(at + 1, 4), nullptr, 16);
        REQUIRE_MESSAGE(code < 0x80, "a \\u escape above ASCII: ", s.substr(at - 1, 6));
        out += static_cast<char>(code);
        at += 4;
        break;
      }
      default: out += e;  // " \ /
    }
  }
  ++at;
  return out;
}

ReaderLine parse_reader_line(const std::string& line) {
  CAPTURE(line);
  ReaderLine r;
  const std::string step_key = "{\"step\": ";
  REQUIRE(line.starts_with(step_key));
  size_t at = step_key.size();
  size_t used = 0;
  r.step = std::stoll(line.substr(at), &used);
  at += used;
  const std::string tag_key = ", \"tag\": ";
  REQUIRE(line.compare(at, tag_key.size(), tag_key) == 0);
  at += tag_key.size();
  r.tag = json_string(line, at);
  if (line.compare(at, 11, ", \"value\": ") == 0) {
    r.value = std::stod(line.substr(at + 11));
  } else {
    REQUIRE(line.compare(at, 10, ", \"text\": ") == 0);
    at += 10;
    r.text = json_string(line, at);
  }
  return r;
}

testing::ProcessResult run_reader(const std::string& event_file) {
  REQUIRE_MESSAGE(std::filesystem::exists(kPython), kPython,
                  " is missing: install the Debian package python3 (scripts/setup.sh)");
  return testing::run_process(std::string(kPython) + " test/app/read_tfevents.py '" + event_file +
                              "'");
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("TensorBoard: CRC32C from ISA-L is the standard one and TFRecord masks it") {
    // The check value of CRC-32C (Castagnoli, reflected, init and final xor ~0).
    CHECK(crc32c("123456789") == 0xE3069283u);
    CHECK(crc32c("") == 0u);
    // Masked values from Debian's python3-crc32c with TFRecord's mask.
    CHECK(masked_crc32c("123456789") == 0xC78AB0E5u);
    CHECK(masked_crc32c("") == 0xA282EAD8u);
  }

  TEST_CASE("TensorBoard: one TFRecord is framed byte by byte as TensorFlow frames it") {
    const std::string expected =
        bytes({0x09, 0, 0, 0, 0, 0, 0, 0}) +  // uint64 length 9, little endian
        bytes({0x37, 0xF9, 0x71, 0x39}) +     // masked CRC32C of those 8 bytes: 0x3971f937
        "123456789" +                         // the data
        bytes({0xE5, 0xB0, 0x8A, 0xC7});      // masked CRC32C of the data: 0xc78ab0e5
    CHECK(tfrecord_frame("123456789") == expected);
    CHECK(tfrecord_frame("").size() == 16);
  }

  TEST_CASE("TensorBoard: events carry TensorFlow's field numbers (a zero scalar too)") {
    const std::string folder = fresh_folder("field_numbers");
    std::string path;
    {
      EventFileWriter writer(folder);
      path = writer.path();
      writer.add_scalar("loss", 2.5f, 7, 1000.0);
      writer.add_scalar("zero", 0.0f, 0, 1000.0);
      writer.add_text("note", "hi", 3, 1000.0);
    }
    CHECK(std::filesystem::path(path).filename().string().starts_with("events.out.tfevents."));
    const std::vector<std::string> records = record_data(read_file(path));
    REQUIRE(records.size() == 4);

    // Event.wall_time (1, fixed64 double) then file_version (3, "brain.Event:2").
    CHECK(records[0].size() == 9 + 15);
    CHECK(records[0][0] == 0x09);
    CHECK(records[0].substr(9) == bytes({0x1A, 13}) + "brain.Event:2");

    const std::string wall_time_1000 = bytes({0x09, 0, 0, 0, 0, 0, 0x40, 0x8F, 0x40});  // 1000.0
    // Event {wall_time, step 7 (2, varint), summary (5)} > Summary.value (1) >
    // Value {tag (1) "loss", simple_value (2, fixed32 float 2.5 = 0x40200000)}.
    CHECK(records[1] == wall_time_1000 + bytes({0x10, 7, 0x2A, 13, 0x0A, 11, 0x0A, 4}) + "loss" +
                            bytes({0x15, 0, 0, 0x20, 0x40}));
    // Step 0 is proto3's default and absent; simple_value 0 is present (it is in a oneof), or
    // TensorBoard would not see the point at all.
    CHECK(records[2] == wall_time_1000 + bytes({0x2A, 13, 0x0A, 11, 0x0A, 4}) + "zero" +
                            bytes({0x15, 0, 0, 0, 0}));
    // Value {tag "note", tensor (8) TensorProto {dtype (1) DT_STRING = 7, tensor_shape (2) [],
    // string_val (8) "hi"}, metadata (9) SummaryMetadata {plugin_data (1) {plugin_name (1)
    // "text"}}}.
    CHECK(records[3] == wall_time_1000 + bytes({0x10, 3, 0x2A, 28, 0x0A, 26, 0x0A, 4}) + "note" +
                            bytes({0x42, 8, 0x08, 7, 0x12, 0, 0x42, 2}) + "hi" +
                            bytes({0x4A, 8, 0x0A, 6, 0x0A, 4}) + "text");
  }

  TEST_CASE("TensorBoard: the independent reader accepts every record and reads each value" * doctest::test_suite("fast python")) {
    const std::string yaml =
        "job:\n  dump_folder: ./outputs\nmodel:\n  flavor: debugmodel\noptimizer:\n  lr: 0.0008\n"
        "note: \"a ``` fence, a \\\"quote\\\", a tab\t and ünïcödé\"\n";
    std::vector<StepReport> reports = {
        {1, {{"loss", 10.8125}, {"grad_norm", 3.14159265358979}, {"lr", 8e-4}}},
        {2, {{"loss", 0.0}, {"grad_norm", -1.5}, {"lr", 1e-8}, {"tokens_per_s", 123456789.0}}},
        {10, {{"loss", 0.1}, {"memory/peak_gib", 79.5}}},
        // A diverged run: TensorBoard plots NaN and infinities, so they pass through as such.
        {11, {{"loss", std::nan("")}, {"grad_norm", std::numeric_limits<double>::infinity()}}},
    };

    const std::string folder = fresh_folder("sink");
    std::string path;
    {
      TensorBoardSink sink(folder);
      path = sink.path();
      sink.write_config(yaml);
      for (const StepReport& r : reports) sink.write(r);
      sink.flush();
      CHECK(std::filesystem::file_size(path) > 0);  // flushed, before the sink closes
    }

    const testing::ProcessResult run = run_reader(path);
    INFO("read_tfevents.py stderr: ", run.err);
    REQUIRE(run.exit_code == 0);

    std::vector<ReaderLine> lines;
    std::istringstream out(run.out);
    for (std::string line; std::getline(out, line);) lines.push_back(parse_reader_line(line));

    REQUIRE(lines.size() == 1 + 3 + 4 + 2 + 2);
    CHECK(lines[0].step == 0);
    CHECK(lines[0].tag == "config");
    REQUIRE(lines[0].text.has_value());
    CHECK(*lines[0].text == markdown_code_block(yaml, "yaml"));
    CHECK(lines[0].text->starts_with("````yaml\njob:\n"));

    size_t i = 1;
    for (const StepReport& r : reports) {
      for (const Scalar& s : r.scalars) {
        CAPTURE(s.name);
        const ReaderLine& line = lines.at(i++);
        CHECK(line.step == r.step);
        CHECK(line.tag == s.name);
        REQUIRE(line.value.has_value());
        // TensorBoard scalars are float32: exactly the float nearest the figure.
        if (std::isnan(s.value)) {
          CHECK(std::isnan(*line.value));
        } else {
          CHECK(*line.value == static_cast<double>(static_cast<float>(s.value)));
        }
      }
    }
  }

  TEST_CASE("TensorBoard: the independent reader refuses a record whose data CRC is wrong" * doctest::test_suite("fast python")) {
    const std::string folder = fresh_folder("corrupt");
    std::string path;
    {
      EventFileWriter writer(folder);
      path = writer.path();
      writer.add_scalar("loss", 2.5f, 1, 1000.0);
    }
    std::string file = read_file(path);
    file[file.size() - 5] ^= 0x01;  // the last byte of the scalar's data
    std::ofstream(path, std::ios::binary | std::ios::trunc) << file;

    const testing::ProcessResult run = run_reader(path);
    CHECK(run.exit_code == 1);
    CHECK(run.err.find("read_tfevents: error: record 1 at byte") != std::string::npos);
    CHECK(run.err.find("data CRC") != std::string::npos);
  }

  TEST_CASE("TensorBoard: a folder that cannot be created is one line naming it and the key") {
    const std::string blocker = testing::scratch_dir("tensorboard") + "/a_file";
    std::ofstream(blocker) << "not a folder";
    const std::string folder = blocker + "/tb";
    try {
      EventFileWriter writer(folder);
      FAIL("no InputError for ", folder);
    } catch (const InputError& e) {
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(message.find("'" + folder + "'") != std::string::npos);
      CHECK(message.find("metrics.save_tb_folder") != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }

  TEST_CASE("TensorBoard: the config's code fence outgrows any backtick run in the text") {
    CHECK(markdown_code_block("a: 1\n", "yaml") == "```yaml\na: 1\n```\n");
    CHECK(markdown_code_block("a: 1", "yaml") == "```yaml\na: 1\n```\n");
    CHECK(markdown_code_block("x: \"````\"\n", "yaml") == "`````yaml\nx: \"````\"\n`````\n");
  }
}
