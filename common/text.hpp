#pragma once
// Small text helpers every component shares, so that a rule such as "what counts as blank" or "how a doubled
// separator escapes itself" is written once.

#include <string>
#include <string_view>
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

// Without leading and trailing white space (the "C" locale's isspace).
std::string_view trim(std::string_view text);

// ASCII lower case.
std::string lower(std::string_view text);

}  // namespace ctrun::text
