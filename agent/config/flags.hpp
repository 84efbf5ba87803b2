#pragma once
// The table of every flag ctrun accepts: torchrun's (reference §1.2) plus ctrun's own. One table drives the
// command-line lexer, the PET_* environment defaults, the JSON config file keys, the usage text and the
// table-driven tests, so a flag cannot be known to one of them and missing from another.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctrun::agent {

enum class FlagKind {
  kValue,  // takes one value
  kBool,   // present -> true; PET_<DEST> must be an integer (torchrun's check_env)
  kList,   // takes one value per occurrence; occurrences accumulate, joined by ',' (--export A=1 --export B)
};

struct FlagSpec {
  std::string_view dest;        // underscored name: "nproc_per_node"; PET_<DEST upper> and the config key
  std::string_view short_name;  // "r" for -r, or empty
  FlagKind kind;
  std::optional<std::string_view> default_value;  // nullopt: torchrun's None
  bool pet;                                       // takes a default from PET_<DEST>
  bool from_torchrun;                             // false: a ctrun extension
  std::string_view help;
};

const std::vector<FlagSpec>& flag_table();
const FlagSpec* find_flag(std::string_view dest);

// "nproc_per_node" -> "--nproc-per-node"; "PET_NPROC_PER_NODE".
std::string dashed_name(std::string_view dest);
std::string underscored_name(std::string_view dest);
std::string pet_name(std::string_view dest);

}  // namespace ctrun::agent
