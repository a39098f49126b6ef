// cuBLASLt FP8 scaled GEMM (in progress).
#include "fp8/scaled_gemm.h"
