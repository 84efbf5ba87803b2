#pragma once
// Small text helpers every component shares, so that a rule such as "what counts as blank" or "how a doubled
// separator escapes itself" is written once.

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ctrun::text {

// Every field between separators, empty ones included: split("a,,b", ',') is {"a", "", "b"}, split("", ',') {""}.
std::vector<std::string> split(std::string_view text, char sep);

// The non-empty fields only: split_nonempty("a,,b,", ',') is {"a", "b"}.
std::vector<std::string> split_nonempty(std::string_view text, char sep);

// Words separated by any run of white space.
std::vector<std::string> split_words(std::string_view text);

// Fields separated by `sep`, where a doubled separator stands for itself (torchrun's escape in --local-addr
// lists and ctrun's env lists): split_escaped("a=1,,2,b=3", ',') is {"a=1,2", "b=3"}. Empty fields are dropped.
std::vector<std::string> split_escaped(std::string_view text, char sep);

std::string join(const std::vector<std::string>& items, std::string_view sep);

// Every item of `items` worded by `word` (anything std::string can be appended from), separated by `sep`:
// join_with(ranks, ", ", [](int r) { return std::to_string(r); }).
template <typename Range, typename Word>
std::string join_with(const Range& items, std::string_view sep, Word word) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += sep;
    first = false;
    out += word(item);
  }
  return out;
}

// The whole of `text` as a decimal integer of type T: no blanks, no '+', a '-' only for a signed T, nothing after
// the digits, within T's range; nullopt otherwise. The one integer parser of the project: callers trim first
// when blanks are allowed, and check their own bounds.
template <typename T>
std::optional<T> parse_int(std::string_view text) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  T value{};
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Without leading and trailing white space (the "C" locale's isspace).
std::string_view trim(std::string_view text);

// ASCII lower case.
std::string lower(std::string_view text);

}  // namespace ctrun::text
