// CUDA twin of model/ops/attention.h (in progress).
#include "model/ops/attention.h"
