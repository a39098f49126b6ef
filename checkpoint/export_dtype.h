// The dtypes a Hugging Face export writes its weights in (hf_llama.h: export_hf), by the names
// a config or a command line gives them.
#pragma once

#include "core/dtype.h"
#include "core/enum_names.h"

namespace titan::checkpoint {

inline constexpr EnumName<DType> kExportDTypeList[] = {{DType::F32, "float32"},
                                                       {DType::BF16, "bfloat16"}};
inline constexpr EnumNames<DType> kExportDTypes{"dtype", kExportDTypeList};

}  // namespace titan::checkpoint
