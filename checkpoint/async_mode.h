// How a save proceeds (checkpoint.async_mode in titan_train, torchtitan's names): blocking, or
// staged and written by a background thread (checkpointer.h describes both).
#pragma once

#include "core/enum_names.h"

namespace titan::checkpoint {

enum class AsyncMode { Disabled, Async, AsyncWithPinnedMem };
inline constexpr EnumName<AsyncMode> kAsyncModeList[] = {
    {AsyncMode::Disabled, "disabled"},
    {AsyncMode::Async, "async"},
    {AsyncMode::AsyncWithPinnedMem, "async_with_pinned_mem"},
};
inline constexpr EnumNames<AsyncMode> kAsyncModes{"mode", kAsyncModeList};

}  // namespace titan::checkpoint
