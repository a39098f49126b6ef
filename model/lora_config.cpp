#include "model/lora_config.h"

#include <algorithm>

#include "core/check.h"

namespace titan::model {

const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names = {"wqkv", "wo", "w13", "w2"};
  return names;
}

int64_t lora_target_parts(std::string_view name) {
  return name == "wqkv" ? 3 : name == "w13" ? 2 : 1;
}

bool LoraConfig::targets_linear(std::string_view name) const {
  return enabled() && std::find(targets.begin(), targets.end(), name) != targets.end();
}

void validate_lora(const LoraConfig& lora, std::string_view section) {
  const std::string s(section);
  if (lora.rank < 0) input_error(s, ".rank: must be 0 (off) or positive, got ", lora.rank);
  if (!lora.enabled()) return;
  if (!(lora.alpha > 0)) input_error(s, ".alpha: must be positive, got ", lora.alpha);
  if (lora.dropout != 0) {
    input_error(s, ".dropout: only 0 is supported (no dropout on the adapters' input), got ",
                lora.dropout, "; set it to 0");
  }
  const std::vector<std::string>& known = lora_target_names();
  std::string list;
  for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
  if (lora.targets.empty()) input_error(s, ".targets: empty; name some of ", list);
  for (const std::string& t : lora.targets) {
    if (std::find(known.begin(), known.end(), t) == known.end()) {
      input_error(s, ".targets: no linear '", t, "' in a Llama 3 block; the linears are ", list);
    }
  }
  for (size_t i = 0; i < lora.targets.size(); ++i) {
    if (std::count(lora.targets.begin(), lora.targets.end(), lora.targets[i]) > 1) {
      input_error(s, ".targets: '", lora.targets[i], "' named twice; name each linear once");
    }
  }
}

}  // namespace titan::model
