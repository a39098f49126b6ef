// CUDA twin of model/ops/adamw.h (in progress).
#include "model/ops/adamw.h"
