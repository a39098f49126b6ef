// Fuzz target: the command line (app/cli.h: parse_command_line).
//
// The input is argv after the program name, arguments separated by NUL bytes. A --config path
// is read as a file, so the seeds name configs/*.yaml (scripts/fuzz.sh runs from the repository
// root); an input that names a device or kernel file (/dev, /proc, /sys: endless or blocking
// reads that a user would not mean) is skipped.
//
// Contract: parse_command_line returns or throws InputError. --help gives text; --print-config
// gives YAML that loads back to the same config.
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/config_yaml.h"
#include "fuzz/fuzz_support.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = {"titan_train"};
  for (size_t begin = 0; begin <= input.size();) {
    size_t end = input.find('\0', begin);
    if (end == std::string::npos) end = input.size();
    args.push_back(input.substr(begin, end - begin));
    begin = end + 1;
  }
  for (const std::string& arg : args) {
    for (const char* device : {"/dev", "/proc", "/sys"}) {
      if (arg.find(device) != std::string::npos) return 0;
    }
  }
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());

  app::CommandLine line;
  if (!fuzz::fuzz_reads("parse_command_line", [&] {
        line = app::parse_command_line(static_cast<int>(argv.size()), argv.data());
      })) {
    return 0;
  }
  if (line.action == app::CommandLine::Action::Help) {
    FUZZ_REQUIRE(!line.text.empty(), "parse_command_line", "--help gave no text");
  }
  if (line.action == app::CommandLine::Action::PrintConfig) {
    const std::string path =
        fuzz::write_scratch_file("printed.yaml", line.text.data(), line.text.size());
    app::JobConfig again;
    FUZZ_REQUIRE(fuzz::fuzz_reads("load_yaml", [&] { app::load_yaml(again, path); }),
                 "--print-config", "its YAML does not load back:\n" + line.text);
    FUZZ_REQUIRE(app::to_yaml(again) == line.text, "--print-config",
                 "its YAML loads back as another config: " +
                     fuzz::first_difference(line.text, app::to_yaml(again)));
  }
  return 0;
}
