// The folders a run writes into (traces, memory snapshots, TensorBoard) are checked before
// training, so that a typo costs seconds, not the steps before the first write.
#pragma once

#include <string>

namespace titan::app {

// Creates `folder` (and its parents) and proves it writable by creating and removing a file in
// it. InputError naming `key`, the folder and the reason otherwise.
void ensure_writable_folder(const std::string& folder, const std::string& key);

}  // namespace titan::app
