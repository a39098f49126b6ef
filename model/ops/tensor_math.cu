// CUDA twin of model/ops/tensor_math.h (in progress).
#include "model/ops/tensor_math.h"
