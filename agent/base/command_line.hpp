#pragma once
// What the command-line pieces share (cli.cpp lexes and merges; config_file.cpp, launch_config_builder.cpp,
// nproc.cpp and the worker environment read from them): the usage error, the environment lookup, and the lexed
// command line. A header of its own, so that none of them includes cli.hpp back.

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ctrun::agent {

// A bad command line: ctrun prints the usage line and the message and exits 2 (as argparse).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// -h/--help: what() is the full help text; exit 0.
class HelpRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// What the command line said, before merging: dest -> value ("1" for boolean flags that were given).
struct CommandLine {
  std::map<std::string, std::string> values;
  std::string script;
  std::vector<std::string> script_args;
};

}  // namespace ctrun::agent
