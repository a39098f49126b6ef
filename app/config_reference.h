// What titan_train says about its own config: the markdown reference (docs/config.md, which a
// test keeps equal to it) and the footer of --help, both generated from the key table and the
// exit-code table (core/exit_code.h), so neither can miss a section, a key or a code.
#pragma once

#include <string>

namespace titan::app {

// A markdown reference of every flag, exit code, section and key (docs/config.md).
std::string config_reference_markdown();

// The end of --help: the sections, and the exit codes with their meanings.
std::string help_footer();

}  // namespace titan::app
