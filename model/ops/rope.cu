// CUDA twin of model/ops/rope.h (in progress).
#include "model/ops/rope.h"
