// Parameter groups (optimizer.groups): each parameter's learning-rate scale and weight decay,
// from the first rule whose regex finds a match in its checkpoint name ("norm.weight",
// "layers.3.attention.wqkv.weight", "tok_embeddings.weight"); a parameter no rule matches takes
// the optimizer's own values. torchtitan's ParamGroupConfig reads the same way: first match wins.
//
// The usual recipe, no decay on the norms and the embedding:
//   optimizer:
//     groups:
//       - {match: "norm", weight_decay: 0}
//       - {match: "^tok_embeddings", weight_decay: 0}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace titan::model {

struct ParamGroupRule {
  std::string match;                   // ECMAScript regex, searched for in the name
  double lr_scale = 1.0;               // the scheduled learning rate times this
  std::optional<double> weight_decay;  // unset: optimizer.weight_decay
};

// What one parameter's update uses.
struct ParamHyper {
  double lr_scale = 1.0;
  double weight_decay = 0.0;
  int group = -1;  // the rule's index, -1 for none
};

// Each name's hyper-parameters, in the order given. InputError naming `key` for a regex that
// does not compile, and for a rule that matches none of `names` (`names` must be the whole
// model's, not one pipeline stage's, so that a rule is judged on the model it describes).
std::vector<ParamHyper> assign_param_groups(const std::vector<ParamGroupRule>& rules,
                                            const std::vector<std::string>& names,
                                            double default_weight_decay, const std::string& key);

// One line per rule and one for the rest: "optimizer.groups[0] 'norm': 17 parameters (2,304
// values), lr × 1, weight_decay 0". `sizes` are the parameters' element counts, in `names`'
// order.
std::vector<std::string> describe_param_groups(const std::vector<ParamGroupRule>& rules,
                                               const std::vector<ParamHyper>& hypers,
                                               const std::vector<int64_t>& sizes,
                                               double default_weight_decay,
                                               const std::string& key);

}  // namespace titan::model
