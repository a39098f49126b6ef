// titan_train --plan [--plan-world N] [--plan-device NAME] [--plan-search]: the plan of a config
// on a world of N ranks and a device, made by one process with no launcher and no allocation
// (as --print-config is). Bad input — an unknown device, a world the configured mesh cannot
// factor, a model or batch the mesh cannot take — is an InputError of one line.
#pragma once

#include <cstdint>
#include <string>

#include "app/config.h"

namespace titan::app::plan {

struct PlanRequest {
  int64_t world = 0;    // --plan-world; 0: the launch's world size
  std::string device;   // --plan-device; empty: cpu for training.device cpu, else h100
  bool search = false;  // --plan-search
};

// The text --plan prints.
std::string plan_text(const JobConfig& config, const PlanRequest& request, int64_t launch_world);

}  // namespace titan::app::plan
