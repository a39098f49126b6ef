#include "model/optim/param_groups.h"

#include <regex>
#include <sstream>

#include "core/check.h"

namespace titan::model {

std::vector<ParamHyper> assign_param_groups(const std::vector<ParamGroupRule>& rules,
                                            const std::vector<std::string>& names,
                                            double default_weight_decay, const std::string& key) {
  std::vector<std::regex> patterns;
  for (size_t g = 0; g < rules.size(); ++g) {
    try {
      patterns.emplace_back(rules[g].match, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      input_error(key, "[", g, "].match: '", rules[g].match, "' is not a regex (", e.what(),
                  "); write an ECMAScript regex such as \"norm\" or \"^layers\\\\.0\\\\.\"");
    }
  }
  std::vector<ParamHyper> hypers(names.size(), ParamHyper{1.0, default_weight_decay, -1});
  std::vector<bool> matched(rules.size(), false);
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t g = 0; g < rules.size(); ++g) {
      if (!std::regex_search(names[i], patterns[g])) continue;
      hypers[i] = {rules[g].lr_scale, rules[g].weight_decay.value_or(default_weight_decay),
                   static_cast<int>(g)};
      matched[g] = true;
      break;
    }
  }
  for (size_t g = 0; g < rules.size(); ++g) {
    if (matched[g]) continue;
    input_error(key, "[", g, "].match: '", rules[g].match, "' matches no parameter",
                g > 0 ? " that an earlier group does not take first" : "",
                "; the names are the checkpoint's, e.g. '", names.empty() ? "" : names.front(),
                "', 'layers.0.attention.wqkv.weight', 'norm.weight' (docs/optimizers.md lists "
                "them); fix the regex or remove the group");
  }
  return hypers;
}

std::vector<std::string> describe_param_groups(const std::vector<ParamGroupRule>& rules,
                                               const std::vector<ParamHyper>& hypers,
                                               const std::vector<int64_t>& sizes,
                                               double default_weight_decay,
                                               const std::string& key) {
  TT_CHECK(hypers.size() == sizes.size(), "describe_param_groups: ", hypers.size(),
           " hyper-parameters for ", sizes.size(), " parameters");
  std::vector<int64_t> count(rules.size() + 1, 0), values(rules.size() + 1, 0);
  for (size_t i = 0; i < hypers.size(); ++i) {
    const size_t g = hypers[i].group < 0 ? rules.size() : static_cast<size_t>(hypers[i].group);
    ++count[g];
    values[g] += sizes[i];
  }
  std::vector<std::string> lines;
  for (size_t g = 0; g <= rules.size(); ++g) {
    const bool rest = g == rules.size();
    std::ostringstream line;
    if (rest) {
      line << "the other parameters";
    } else {
      line << key << "[" << g << "] '" << rules[g].match << "'";
    }
    line << ": " << count[g] << " parameters (" << values[g] << " values), lr × "
         << (rest ? 1.0 : rules[g].lr_scale) << ", weight_decay "
         << (rest ? default_weight_decay : rules[g].weight_decay.value_or(default_weight_decay));
    lines.push_back(line.str());
  }
  return lines;
}

}  // namespace titan::model
