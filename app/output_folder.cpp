#include "app/output_folder.h"

#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace titan::app {

namespace fs = std::filesystem;

void ensure_writable_folder(const std::string& folder, const std::string& key) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) {
    input_error(key, ": cannot create the folder '", folder, "' (", ec.message(),
                "); point job.dump_folder or ", key, " at a writable place");
  }
  const fs::path probe = fs::path(folder) / ".titan_write_test";
  std::ofstream out(probe);
  if (!out) {
    input_error(key, ": cannot write in '", folder, "'; point job.dump_folder or ", key,
                " at a writable place");
  }
  out.close();
  fs::remove(probe, ec);
}

}  // namespace titan::app
