#pragma once
// Where each flag's value comes from, resolved in one place: the command line, then the --config file, then
// PET_<NAME> (for flags that read one) — what the user said — then values derived from a scheduler's variables
// (agent/cluster/), then torch's own variable for the flag (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), then the default.

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "agent/base/command_line.hpp"
#include "agent/config/flags.hpp"

namespace ctrun::agent {

// A flag's text and where it came from, for messages: "" (the command line), "the --config file", "PET_NNODES", ...
struct FlagText {
  std::string text;
  std::string origin;
};

class FlagSources {
 public:
  FlagSources(CommandLine cli, std::map<std::string, std::string> file_values, EnvLookup env);

  // What the user said: the command line, else the config file, else PET_<NAME>.
  std::optional<FlagText> given(const FlagSpec& flag) const;
  std::optional<std::string> given(std::string_view dest) const;
  // A boolean flag the user gave, read by the one boolean rule (parse_flag_bool); false when not given.
  bool given_true(std::string_view dest) const;

  // Values below what the user said and above torch's variables and the defaults (dest -> text, origin).
  void set_derived(std::map<std::string, FlagText> derived) { derived_ = std::move(derived); }

  // The flag's value by the whole order, nullopt for a flag without a default that nothing set.
  std::optional<FlagText> resolve(const FlagSpec& flag) const;

  // Parses `value` into the flag's field; a bad value becomes a UsageError naming the flag and the origin.
  static void apply(const FlagSpec& flag, const FlagText& value, LaunchConfig& c);

  const CommandLine& command_line() const { return cli_; }

 private:
  CommandLine cli_;
  std::map<std::string, std::string> file_;
  EnvLookup env_;
  std::map<std::string, FlagText> derived_;
};

// The config file a command line names (--config, else PET_CONFIG), read; empty when none is named.
std::map<std::string, std::string> config_file_values(const CommandLine& cli, const EnvLookup& env);

}  // namespace ctrun::agent
