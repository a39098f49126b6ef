// CUDA FP8 quantize kernels (in progress).
#include "fp8/float8_tensor.h"
