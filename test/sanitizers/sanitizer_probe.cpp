// Does one thing a sanitizer must report, named by its argument: test_reports.sh checks that
// the report reaches the file its tool's log_path names (not stderr, where a test that captures
// a child's output would hide it). Built only in a TITAN_SANITIZE tree.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

int* volatile g_pointer;  // volatile: the optimiser keeps every store of a pointer
volatile int g_sink = 0;  // and every read into it
volatile int g_shared = 0;

// `zero` is 0 at run time: sizes the compiler cannot see keep UBSan's object-size check out
// of ASan's way.
int heap_buffer_overflow(int zero) {
  g_pointer = new int[4 + zero];
  g_sink = g_pointer[4 + zero];  // one past the end
  return 0;
}

int signed_overflow(int zero) {
  const int big = 0x7fffffff - zero;
  g_sink = big + 1;
  return 0;
}

int leak() {
  g_pointer = static_cast<int*>(std::malloc(64));
  g_pointer = nullptr;
  return 0;
}

int data_race() {
  std::thread other([] { g_shared = g_shared + 1; });
  g_shared = g_shared + 1;
  other.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  const int zero = argc - 2;  // 0, unknown to the compiler
  if (std::strcmp(what, "heap-buffer-overflow") == 0) return heap_buffer_overflow(zero);
  if (std::strcmp(what, "signed-overflow") == 0) return signed_overflow(zero);
  if (std::strcmp(what, "leak") == 0) return leak();
  if (std::strcmp(what, "data-race") == 0) return data_race();
  std::fprintf(stderr, "usage: sanitizer_probe heap-buffer-overflow|signed-overflow|leak|data-race\n");
  return 2;
}
