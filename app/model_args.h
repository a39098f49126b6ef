// model.*: the model's dims from the config, apart from layer_options.h so that what needs only
// them (the readers' fuzz targets, through --print-pipeline-schedule) links nothing else.
#pragma once

#include "app/config.h"
#include "model/config.h"

namespace titan::app {

// model.*: the flavor's dims with the config's overrides (0 keeps the flavor's).
model::ModelArgs model_args(const JobConfig& config);

}  // namespace titan::app
