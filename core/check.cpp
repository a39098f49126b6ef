#include "core/check.h"

#include <algorithm>

namespace titan::detail {

namespace {

// "…/titan_train/model/ops/rmsnorm.cpp" -> "model/ops/rmsnorm.cpp": the part a reader can open.
std::string short_path(const std::string& path) {
  size_t first = std::string::npos;
  for (const char* layer :
       {"/core/", "/fp8/", "/model/", "/parallel/", "/data/", "/checkpoint/", "/app/", "/test/"}) {
    first = std::min(first, path.rfind(layer));
  }
  return first == std::string::npos ? path : path.substr(first + 1);
}

}  // namespace

void check_failed(const char* expr, const std::string& message, std::source_location where) {
  std::string text = message.empty() ? std::string("check failed: ") + expr
                                     : message + " (check failed: " + expr + ")";
  throw Error(text + " at " + short_path(where.file_name()) + ":" + std::to_string(where.line()));
}

}  // namespace titan::detail
