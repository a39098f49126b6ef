// The names of an enum's values as a config writes them ("rowwise_with_gw_hp", "disabled"), in
// one table per enum, owned by the layer that owns the enum (fp8::RecipeKind's in fp8/recipe.h,
// checkpoint::AsyncMode's in checkpoint/async_mode.h, …). The parser, the printer and the list
// of allowed values in an error all read that table, so none of them can drift from the others:
// a value added to the table is accepted, printed and offered by every error at once.
//
//   enum class Decay { Linear, Cosine };
//   inline constexpr EnumName<Decay> kDecayNameList[] = {{Decay::Linear, "linear"},
//                                                         {Decay::Cosine, "cosine"}};
//   inline constexpr EnumNames<Decay> kDecayNames{"decay", kDecayNameList};
//   kDecayNames.parse("step", "lr_scheduler.decay_type")
//     → InputError "lr_scheduler.decay_type: unknown decay 'step'; use linear or cosine"
//
// The key in that message comes from the caller: a lower layer's table never names the option
// of the executable that reads it.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"

namespace titan {

// "a", "a or b", "a, b or c": the allowed values as an error lists them.
inline std::string list_alternatives(std::span<const std::string_view> names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += names[i];
  }
  return text;
}

// Throws InputError "<key>: unknown <noun> '<text>'; use <allowed>" ("unknown <noun> …" when
// `key` is empty): the one wording of a value that is not a name of its table.
[[noreturn]] inline void refuse_unknown_name(std::string_view key, std::string_view noun,
                                             std::string_view text,
                                             std::span<const std::string_view> allowed) {
  input_error(key, key.empty() ? "" : ": ", "unknown ", noun, " '", text, "'; use ",
              list_alternatives(allowed));
}

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E>
class EnumNames {
 public:
  template <size_t N>
  constexpr EnumNames(std::string_view noun, const EnumName<E> (&names)[N])
      : noun_(noun), names_(names) {}

  // What a value is called in an error: "recipe" in "unknown recipe 'mxfp8'".
  constexpr std::string_view noun() const { return noun_; }
  constexpr std::span<const EnumName<E>> entries() const { return names_; }

  constexpr std::string_view name(E value) const {
    for (const EnumName<E>& entry : names_) {
      if (entry.value == value) return entry.name;
    }
    return "?";
  }

  constexpr bool contains(E value) const {
    for (const EnumName<E>& entry : names_) {
      if (entry.value == value) return true;
    }
    return false;
  }

  constexpr std::optional<E> find(std::string_view name) const {
    for (const EnumName<E>& entry : names_) {
      if (entry.name == name) return entry.value;
    }
    return std::nullopt;
  }

  // Every name, in the table's order.
  std::vector<std::string_view> names() const {
    std::vector<std::string_view> all;
    for (const EnumName<E>& entry : names_) all.push_back(entry.name);
    return all;
  }

  // The value `text` names; refuse_unknown_name (InputError naming `key`) for any other text.
  E parse(std::string_view text, std::string_view key) const {
    if (const std::optional<E> value = find(text)) return *value;
    refuse_unknown_name(key, noun_, text, names());
  }

 private:
  std::string_view noun_;
  std::span<const EnumName<E>> names_;
};

}  // namespace titan
