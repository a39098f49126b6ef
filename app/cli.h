// The command line: --config FILE, then any --section.key value overrides (CLI11).
#pragma once

#include <string>

#include "app/config.h"
#include "app/plan/plan_command.h"

namespace titan::app {

struct CommandLine {
  enum class Action {
    Train,            // the default
    Help,             // --help: `text` holds the usage
    PrintConfig,      // --print-config: print the effective config as YAML and exit
    ConfigReference,  // --config-reference: print docs/config.md and exit
    ListDevices,      // --list-devices: print the CUDA devices this process can use and exit
    PrintPipelineSchedule,  // --print-pipeline-schedule: the stages, each rank's actions and
                            // the simulator's figures; exit
    Plan,                   // --plan (--plan-world, --plan-device, --plan-search): print the plan
  };
  Action action = Action::Train;
  JobConfig config;  // defaults ← YAML file ← command-line overrides, validated
  std::string text;
  plan::PlanRequest plan;  // Plan: the world, the device, whether to search the meshes
};

// InputError (one line, naming the flag and the fix) for an unknown flag, a missing value, a
// value of the wrong type, or a config that fails validation.
CommandLine parse_command_line(int argc, const char* const* argv);

}  // namespace titan::app
