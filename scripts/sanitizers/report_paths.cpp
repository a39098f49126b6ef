// Linked into every executable of a gcc tree with ASan and UBSan (TITAN_SANITIZE=
// address,undefined; the root CMakeLists.txt adds it), so that each runtime writes its reports
// where its own options' log_path says.
//
// gcc links two runtimes, libasan and libubsan, each with its own copy of sanitizer_common and
// its own report file. libubsan's start-up sets its report file through the exported
// __sanitizer_set_report_path, and that call resolves to libasan's copy (loaded first): ASan's
// reports then go to UBSAN_OPTIONS' log_path, and UBSan's stay on stderr — where a test that
// captures a child's stderr, or ignores it, loses them. This constructor runs after both
// runtimes have started and calls each runtime's own setter, found by dlsym in its library.
// (clang links one runtime; there this finds no libubsan and does nothing more than it did.)
#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// The last `key=value` in the options string of `env` ("" when absent). Options are separated
// as sanitizer_common separates them; scripts/sanitize.sh writes no quoted values.
std::string option_value(const char* env, const std::string& key) {
  const char* options = std::getenv(env);
  if (options == nullptr) return "";
  const std::string text = options;
  std::string value;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find_first_of(": \t\n,", at), text.size());
    const std::string item = text.substr(at, end - at);
    if (item.starts_with(key + "=")) value = item.substr(key.size() + 1);
    at = end + 1;
  }
  return value;
}

// The loaded library whose path holds `name`, or nullptr.
void* loaded_library(const char* name) {
  struct Search {
    const char* name;
    std::string path;
  } search{name, ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, s->name) == nullptr) return 0;
        s->path = info->dlpi_name;
        return 1;
      },
      &search);
  return search.path.empty() ? nullptr : dlopen(search.path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
}

void set_report_path(const char* library, const char* env) {
  const std::string path = option_value(env, "log_path");
  if (path.empty()) return;
  void* handle = loaded_library(library);
  if (handle == nullptr) return;
  using Setter = void (*)(const char*);
  if (auto set = reinterpret_cast<Setter>(dlsym(handle, "__sanitizer_set_report_path"))) {
    set(path.c_str());
  }
}

__attribute__((constructor)) void sanitizer_report_paths() {
  set_report_path("/libasan.so", "ASAN_OPTIONS");
  set_report_path("/libubsan.so", "UBSAN_OPTIONS");
}

}  // namespace
