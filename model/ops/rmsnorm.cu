// CUDA twin of model/ops/rmsnorm.h (in progress).
#include "model/ops/rmsnorm.h"
