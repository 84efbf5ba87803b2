#include "agent/cli.hpp"

#include <cstdlib>

#include <CLI/CLI.hpp>

#include "agent/config_file.hpp"
#include "agent/flags.hpp"
#include "agent/launch_config_builder.hpp"

namespace ctrun::agent {
namespace {

std::string option_names(const FlagSpec& f) {
  std::string names;
  if (!f.short_name.empty()) names = "-" + std::string(f.short_name) + ",";
  names += dashed_name(f.dest);
  if (dashed_name(f.dest) != underscored_name(f.dest)) names += "," + underscored_name(f.dest);
  return names;
}

// Builds the CLI11 app over the flag table. Values land in `values`; flags are read back by count().
struct Lexer {
  CLI::App app{"ctrun: a per-node launcher for PyTorch-style distributed jobs (torchrun compatible)", "ctrun"};
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;

  Lexer() {
    // Stop at the first word that is not an option: it is SCRIPT and the rest is the script's.
    app.prefix_command();
    app.set_help_flag("-h,--help", "Show this help and exit.");
    for (const auto& f : flag_table()) {
      std::string dest(f.dest);
      CLI::Option* opt = nullptr;
      if (f.kind == FlagKind::kBool) {
        opt = app.add_flag(option_names(f))->description(std::string(f.help));
      } else {
        opt = app.add_option(option_names(f), values[dest], std::string(f.help))
                  ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      }
      std::string text = f.kind == FlagKind::kValue ? "VALUE" : "";
      if (f.kind == FlagKind::kValue && f.default_value && !f.default_value->empty()) {
        text += " [default: " + std::string(*f.default_value) + "]";
      }
      if (f.pet) text += " [env: " + pet_name(f.dest) + "]";
      opt->option_text(text);
      options[dest] = opt;
    }
    app.footer("SCRIPT [script args...]: the worker program; every word after SCRIPT is passed to it untouched.");
  }
};

// argparse's long-option handling that CLI11 lacks, applied to the words before SCRIPT: an unambiguous prefix of a
// long flag stands for it (`--nproc=2`), an ambiguous one is an error naming the candidates, and `--flag=` with
// nothing after the `=` is an error (never an empty value, never the next word).
std::vector<std::string> expand_long_options(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  bool value_next = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (value_next) {
      value_next = false;
      out.push_back(word);
      continue;
    }
    if (word == "--" || word.size() < 2 || word[0] != '-') {  // SCRIPT (or `--`): the rest is the script's
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      return out;
    }
    if (word[1] != '-') {  // a short option: -r3, -m, -r 3
      const FlagSpec* f = nullptr;
      for (const auto& spec : flag_table()) {
        if (!spec.short_name.empty() && word.substr(1) == spec.short_name) f = &spec;
      }
      value_next = f != nullptr && f->kind == FlagKind::kValue;
      out.push_back(word);
      continue;
    }
    const auto eq = word.find('=');
    const std::string name = word.substr(0, eq);
    std::vector<const FlagSpec*> exact, prefixed;
    for (const auto& spec : flag_table()) {
      const std::string dashed = dashed_name(spec.dest), underscored = underscored_name(spec.dest);
      if (name == dashed || name == underscored) {
        exact.push_back(&spec);
      } else if (dashed.rfind(name, 0) == 0 || underscored.rfind(name, 0) == 0) {
        prefixed.push_back(&spec);
      }
    }
    const FlagSpec* flag = nullptr;
    std::string full = name;
    if (!exact.empty()) {
      flag = exact.front();
    } else if (prefixed.size() == 1) {
      flag = prefixed.front();
      full = dashed_name(flag->dest);
    } else if (prefixed.size() > 1) {
      std::string candidates;
      for (const auto* c : prefixed) candidates += (candidates.empty() ? "" : ", ") + dashed_name(c->dest);
      throw UsageError("ambiguous option: " + name + " could match " + candidates);
    }
    if (flag != nullptr && flag->kind == FlagKind::kValue) {
      if (eq != std::string::npos && eq + 1 == word.size())
        throw UsageError("argument " + full + ": expected a value after '=' (an empty value is not allowed)");
      value_next = eq == std::string::npos;
    }
    out.push_back(eq == std::string::npos ? full : full + word.substr(eq));
  }
  return out;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string usage_line() {
  return "usage: ctrun [-h] [--nnodes NNODES] [--nproc-per-node NPROC_PER_NODE] [--standalone] [...] "
         "SCRIPT ...";
}

CommandLine lex_command_line(const std::vector<std::string>& args) {
  Lexer lexer;
  const std::vector<std::string> expanded = expand_long_options(args);
  // CLI11 wants the words in reverse order.
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend());
  try {
    lexer.app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(lexer.app.help());
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  CommandLine out;
  for (const auto& f : flag_table()) {
    std::string dest(f.dest);
    auto* opt = lexer.options[dest];
    if (opt->count() == 0) continue;
    out.values[dest] = f.kind == FlagKind::kBool ? "1" : lexer.values[dest];
  }
  std::vector<std::string> rest = lexer.app.remaining();
  // argparse accepts `--` before SCRIPT as "no more options".
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) throw UsageError("the following arguments are required: training_script");
  if (rest.front().size() > 1 && rest.front()[0] == '-' &&
      !(expanded.size() >= rest.size() + 1 && expanded[expanded.size() - rest.size() - 1] == "--")) {
    throw UsageError("unrecognized argument: " + rest.front());
  }
  out.script = rest.front();
  out.script_args.assign(rest.begin() + 1, rest.end());
  return out;
}

LaunchConfig parse_command_line(const std::vector<std::string>& args, const EnvLookup& env) {
  CommandLine cli = lex_command_line(args);
  std::map<std::string, std::string> file_values;
  std::optional<std::string> config_path;
  if (auto it = cli.values.find("config"); it != cli.values.end()) {
    config_path = it->second;
  } else if (auto pet = env(pet_name("config"))) {
    config_path = *pet;
  }
  if (config_path) file_values = read_config_file(*config_path);
  return build_launch_config(cli, file_values, env);
}

}  // namespace ctrun::agent
