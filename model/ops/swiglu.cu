// CUDA twin of model/ops/swiglu.h (in progress).
#include "model/ops/swiglu.h"
