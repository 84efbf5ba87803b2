#pragma once
// The table of every flag ctrun accepts: torchrun's plus ctrun's own. Each row binds its flag: the names, the
// help, the default, and the parser that fills its LaunchConfig field. The same table drives the command-line
// lexer, the PET_* environment, the JSON config file keys, the usage text, LaunchConfig's defaults and the
// table-driven tests, so a flag cannot be known to one of them and missing from another.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

enum class FlagKind {
  kValue,  // takes one value
  kBool,   // present -> true; as text (PET_<DEST>, the config file) read by parse_flag_bool's one rule
  kList,   // takes one value per occurrence; occurrences accumulate, joined by ',' (--export A=1 --export B)
};

// Parses a flag's text into the LaunchConfig field(s) it fills. Throws FlagValueError (the caller names the flag),
// or UsageError / std::invalid_argument with a message that names it already (rendezvous' own parsers).
using FlagBind = void (*)(LaunchConfig&, const std::string& text);

// Where a flag comes from, and who reads it.
enum class FlagOrigin {
  kTorchrun,  // one of torchrun's
  kCtrun,     // a ctrun extension, read by the agent
  kLauncher,  // a ctrun extension the multi-host launcher (--hostfile/--hosts) reads itself: never sent to a host
};

struct FlagSpec {
  std::string_view dest;        // underscored name: "nproc_per_node"; PET_<DEST upper> and the config key
  std::string_view short_name;  // "r" for -r, or empty
  FlagKind kind;
  std::optional<std::string_view> default_value;  // nullopt: torchrun's None (the field stays unset)
  bool pet;                                       // takes a value from PET_<DEST>
  FlagOrigin origin;
  FlagBind bind;                                  // nullptr: read by the pipeline itself (--config, --no-slurm)
  std::string_view help;
  // torch's own variable, read when neither the command line, the config file nor PET_* gave a value.
  std::string_view fallback_env = {};
};

const std::vector<FlagSpec>& flag_table();
const FlagSpec* find_flag(std::string_view dest);

// "nproc_per_node" -> "--nproc-per-node"; "--nproc_per_node"; "PET_NPROC_PER_NODE".
std::string dashed_name(std::string_view dest);
std::string underscored_name(std::string_view dest);
std::string pet_name(std::string_view dest);

}  // namespace ctrun::agent
