// CUDA twin of model/ops/cross_entropy.h (in progress).
#include "model/ops/cross_entropy.h"
