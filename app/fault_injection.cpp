#include "app/fault_injection.h"

#include <charconv>
#include <cstdlib>

#include "core/check.h"

namespace titan::app {
namespace {

constexpr const char* kSyntax =
    "RANK:STEP[:KIND] separated by commas, RANK a world rank or *, KIND one of throw, hang, late, "
    "stop, stop_after, nan_loss, nan_grad, extra_collective (e.g. 1:3 or *:5:nan_grad)";

template <class T>
bool parse_number(const std::string& text, T& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

bool parse_kind(const std::string& text, FaultKind& kind) {
  static const std::pair<const char*, FaultKind> kinds[] = {
      {"throw", FaultKind::Throw},         {"hang", FaultKind::Hang},
      {"late", FaultKind::Late},
      {"stop", FaultKind::Stop},           {"stop_after", FaultKind::StopAfter},
      {"nan_loss", FaultKind::NanLoss},
      {"nan_grad", FaultKind::NanGrad},    {"extra_collective", FaultKind::ExtraCollective}};
  for (const auto& [name, value] : kinds) {
    if (text == name) {
      kind = value;
      return true;
    }
  }
  return false;
}

InjectedFault parse_one(const std::string& item, const std::string& spec) {
  auto bad = [&spec](const std::string& why) {
    input_error("TITAN_FAULT_INJECT: '", spec, "': ", why, "; unset it, or write ", kSyntax);
  };
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t colon = item.find(':', start);
    fields.push_back(item.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (fields.size() < 2 || fields.size() > 3) bad("'" + item + "' is not RANK:STEP[:KIND]");
  InjectedFault fault;
  if (fields[0] != "*" && (!parse_number(fields[0], fault.rank) || fault.rank < 0)) {
    bad("rank '" + fields[0] + "' is not a world rank or *");
  }
  if (!parse_number(fields[1], fault.step) || fault.step < 1) {
    bad("step '" + fields[1] + "' is not a step number (1 or more)");
  }
  if (fields.size() == 3 && !parse_kind(fields[2], fault.kind)) {
    bad("unknown kind '" + fields[2] + "'");
  }
  return fault;
}

}  // namespace

std::vector<InjectedFault> parse_fault_injection(const std::string& spec) {
  std::vector<InjectedFault> faults;
  size_t start = 0;
  for (;;) {
    const size_t comma = spec.find(',', start);
    faults.push_back(parse_one(spec.substr(start, comma - start), spec));
    if (comma == std::string::npos) return faults;
    start = comma + 1;
  }
}

std::vector<InjectedFault> injected_faults() {
  const char* spec = std::getenv("TITAN_FAULT_INJECT");
  if (spec == nullptr || *spec == '\0') return {};
  return parse_fault_injection(spec);
}

bool fault_due(const std::vector<InjectedFault>& faults, int rank, int64_t step, FaultKind kind) {
  for (const InjectedFault& f : faults) {
    if ((f.rank == -1 || f.rank == rank) && f.step == step && f.kind == kind) return true;
  }
  return false;
}

}  // namespace titan::app
