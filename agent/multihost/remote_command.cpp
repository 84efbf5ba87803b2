#include "agent/multihost/remote_command.hpp"

#include "agent/base/command_line.hpp"
#include "common/text.hpp"

#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ctrun::agent::multihost {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

void set_var(EnvVars& vars, const std::string& name, const std::string& value) {
  for (auto& [n, v] : vars) {
    if (n == name) {
      v = value;
      return;
    }
  }
  vars.emplace_back(name, value);
}

void read_into(EnvVars& vars, const std::string& path) {
  std::ifstream f(path);
  if (!f) return;
  std::stringstream text;
  text << f.rdbuf();
  for (auto& [n, v] : parse_env_file(text.str(), path)) set_var(vars, n, v);
}

}  // namespace

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string remote_shell_command(const std::string& cwd, const EnvVars& env, const std::vector<std::string>& argv) {
  std::string out = "cd " + shell_quote(cwd) + " && exec env";
  for (const auto& [n, v] : env) out.append(" ").append(shell_quote(n + "=" + v));
  for (const auto& a : argv) out.append(" ").append(shell_quote(a));
  return out;
}

EnvVars parse_env_file(const std::string& text, const std::string& source) {
  EnvVars vars;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    line = line.substr(first);
    if (line.rfind("export ", 0) == 0) line = line.substr(7);
    auto eq = line.find('=');
    std::string name = line.substr(0, eq);
    if (eq == std::string::npos || !valid_name(name)) {
      throw std::invalid_argument(source + ":" + std::to_string(number) + ": expected NAME=VALUE, got '" + line + "'");
    }
    set_var(vars, name, line.substr(eq + 1));
  }
  return vars;
}

EnvVars parse_exports(const std::string& text, const cluster::EnvLookup& env) {
  EnvVars vars;
  for (const auto& item : text::split_escaped(text, ',')) {
    auto eq = item.find('=');
    std::string name = item.substr(0, eq);
    if (!valid_name(name)) throw std::invalid_argument("--export: '" + name + "' is not a variable name");
    if (eq != std::string::npos) {
      set_var(vars, name, item.substr(eq + 1));
    } else if (auto v = env(name)) {
      set_var(vars, name, *v);
    } else {
      throw std::invalid_argument("--export: " + name + " is not set here (give NAME=VALUE)");
    }
  }
  return vars;
}

EnvVars exported_environment(const std::string& exports, const cluster::EnvLookup& env, const std::string& home,
                             const std::string& cwd) {
  EnvVars vars;
  if (!home.empty()) read_into(vars, home + "/.ctrun_env");
  if (cwd != home) read_into(vars, cwd + "/.ctrun_env");
  for (auto& [n, v] : parse_exports(exports, env)) set_var(vars, n, v);
  return vars;
}

}  // namespace ctrun::agent::multihost
