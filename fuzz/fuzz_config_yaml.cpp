// Fuzz target: a YAML config file (app/config_yaml.h: load_yaml, then validate).
//
// Contract: load_yaml and validate return or throw InputError. A config that loads and
// validates prints (to_yaml, what --print-config writes) as YAML that loads back to the same
// config, so a printed config is a config a user can run.
#include <string>

#include "app/config.h"
#include "app/config_validate.h"
#include "app/config_yaml.h"
#include "fuzz/fuzz_support.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch_file("config.yaml", data, size);
  app::JobConfig config;
  if (!fuzz::fuzz_reads("load_yaml", [&] {
        app::load_yaml(config, path);
        app::validate(config);
      })) {
    return 0;
  }
  const std::string printed = app::to_yaml(config);
  const std::string printed_path =
      fuzz::write_scratch_file("printed.yaml", printed.data(), printed.size());
  app::JobConfig again;
  FUZZ_REQUIRE(fuzz::fuzz_reads("load_yaml", [&] { app::load_yaml(again, printed_path); }),
               "to_yaml", "the printed config does not load back:\n" + printed);
  FUZZ_REQUIRE(app::to_yaml(again) == printed, "to_yaml",
               "the printed config loads back as another config: " +
                   fuzz::first_difference(printed, app::to_yaml(again)));
  return 0;
}
