#include "app/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <string_view>

#include "app/closest_key.h"
#include "app/config_keys.h"
#include "app/config_reference.h"
#include "app/config_validate.h"
#include "app/config_yaml.h"
#include "app/model_args.h"
#include "app/pipeline_plan.h"
#include "core/check.h"

namespace titan::app {

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine result;
  CLI::App app{
      "titan_train: trains Llama 3, forward and backward written by hand.\n"
      "Launch with mpirun/srun, or alone as one rank. Every config key is a flag:\n"
      "--section.key value overrides the YAML file given with --config.",
      "titan_train"};
  app.allow_extras();
  app.footer(help_footer());

  std::string config_path;
  bool print_config = false, config_reference = false, list_devices = false, plan = false;
  bool print_pipeline_schedule = false;
  int64_t plan_world = 0;
  app.add_option("--config", config_path, "YAML config file, e.g. configs/debug_model.yaml");
  app.add_flag("--print-config", print_config, "Print the effective config as YAML and exit");
  app.add_flag("--config-reference", config_reference,
               "Print the reference of every key (markdown) and exit");
  app.add_flag("--list-devices", list_devices,
               "List the CUDA devices this process can use and exit");
  app.add_flag("--print-pipeline-schedule", print_pipeline_schedule,
               "Print the pipeline's stages, every pp rank's schedule as a table and the "
               "simulator's bubble and activation figures, and exit (one process, no launcher)");
  app.add_flag("--plan", plan,
               "Print the plan of this config (memory by category against the device, step time, "
               "MFU) and exit; allocates nothing, needs no launcher (docs/planning.md)");
  app.add_option("--plan-world", plan_world,
                 "Ranks the plan is for (implies --plan) [default: the launch's]");
  app.add_option("--plan-device", result.plan.device,
                 "Device the plan is for: h100, h200, b200 or cpu (implies --plan) [default: cpu "
                 "for training.device cpu, else h100]");
  app.add_flag("--plan-search", result.plan.search,
               "Plan every mesh of the world size and rank those that fit by tokens/s (implies "
               "--plan)");

  std::vector<ConfigKey> keys = config_keys(result.config);
  std::vector<std::string> values(keys.size());
  std::vector<CLI::Option*> options;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string help = keys[i].help + " [default " + keys[i].value_text() + "]";
    // CLI11's way to show a value's type: INT, FLOAT, …; an enum-like key's names as {a,b,c}.
    std::string type;
    if (const ChoiceRef* choice = keys[i].choice()) {
      for (std::string_view name : choice->names)
        type += (type.empty() ? "{" : ",") + std::string(name);
      type += "}";
    } else {
      type = keys[i].type_name();
      std::transform(type.begin(), type.end(), type.begin(), ::toupper);
    }
    options.push_back(app.add_option("--" + keys[i].path(), values[i], help)
                          ->group(keys[i].section)
                          ->type_name(type)
                          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.action = CommandLine::Action::Help;
    result.text = app.help();
    return result;
  } catch (const CLI::ParseError& e) {
    input_error("command line: ", e.what(), "; titan_train --help lists every flag");
  }

  std::vector<std::string> extras = app.remaining();
  if (!extras.empty()) {
    std::vector<std::string> known = {"--config",
                                      "--print-config",
                                      "--config-reference",
                                      "--list-devices",
                                      "--print-pipeline-schedule",
                                      "--plan",
                                      "--plan-world",
                                      "--plan-device",
                                      "--plan-search"};
    for (const ConfigKey& key : keys) known.push_back("--" + key.path());
    std::string flag = extras.front().substr(0, extras.front().find('='));
    std::string hint = flag.starts_with("-") ? closest_key(flag, known) : "";
    input_error("command line: unknown ", flag.starts_with("-") ? "flag '" : "argument '", flag,
                "'", hint.empty() ? "" : "; did you mean '" + hint + "'?",
                " (titan_train --help lists every flag)");
  }

  if (!config_path.empty()) load_yaml(result.config, config_path);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (options[i]->count() > 0) set_from_text(keys[i], values[i], "--" + keys[i].path());
  }

  if (config_reference) {
    result.action = CommandLine::Action::ConfigReference;
    result.text = config_reference_markdown();
    return result;
  }
  if (list_devices) {
    result.action = CommandLine::Action::ListDevices;
    return result;
  }
  validate(result.config);
  if (plan || app.count("--plan-world") > 0 || app.count("--plan-device") > 0 ||
      result.plan.search) {
    if (app.count("--plan-world") > 0 && plan_world < 1) {
      input_error("--plan-world: must be a positive number of ranks, got ", plan_world,
                  "; write e.g. --plan-world 8");
    }
    result.action = CommandLine::Action::Plan;
    result.plan.world = plan_world;
    return result;
  }
  if (print_config) {
    result.action = CommandLine::Action::PrintConfig;
    result.text = to_yaml(result.config);
  } else if (print_pipeline_schedule) {
    model::ModelArgs args = model_args(result.config);
    model::validate_model_args(args, "model");
    result.action = CommandLine::Action::PrintPipelineSchedule;
    result.text = pipeline_report(result.config, args);
  }
  return result;
}

}  // namespace titan::app
