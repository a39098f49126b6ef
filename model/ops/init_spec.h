// How a parameter's values are drawn: the distribution a weight is declared with
// (model/parameter.h) and the initialisation op draws from (init_values.h).
#pragma once

namespace titan::model {

enum class InitKind { Zeros, Ones, Normal, TruncatedNormal };

struct InitSpec {
  InitKind kind = InitKind::Normal;
  double std = 1.0;
  // TruncatedNormal: values are drawn from N(0, std²) restricted to [-cutoff, cutoff] (absolute,
  // as torch.nn.init.trunc_normal_'s a and b).
  double cutoff = 2.0;

  static InitSpec zeros() { return {InitKind::Zeros, 0.0, 0.0}; }
  static InitSpec ones() { return {InitKind::Ones, 0.0, 0.0}; }
  static InitSpec normal(double std) { return {InitKind::Normal, std, 0.0}; }
  static InitSpec truncated_normal(double std, double cutoff) {
    return {InitKind::TruncatedNormal, std, cutoff};
  }
};

}  // namespace titan::model
