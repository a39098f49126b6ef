// CUDA twin of model/ops/embedding.h (in progress).
#include "model/ops/embedding.h"
