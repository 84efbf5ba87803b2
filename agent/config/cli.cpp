#include "agent/config/cli.hpp"

#include <cstdlib>

#include <CLI/CLI.hpp>

#include "agent/cluster/cluster_env.hpp"
#include "agent/config/flag_sources.hpp"
#include "agent/config/flags.hpp"
#include "agent/config/launch_config_builder.hpp"
#include "common/text.hpp"
#include "common/version.hpp"

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
  std::map<std::string, std::vector<std::string>> lists;  // kList flags: every occurrence
  std::map<std::string, CLI::Option*> options;

  Lexer() {
    // Stop at the first word that is not an option: it is SCRIPT and the rest is the script's.
    app.prefix_command();
    app.set_help_flag("-h,--help", "Show this help and exit.");
    app.set_version_flag("--version", version_line("ctrun"), "Print the version and git revision and exit.");
    for (const auto& f : flag_table()) {
      std::string dest(f.dest);
      CLI::Option* opt = nullptr;
      if (f.kind == FlagKind::kBool) {
        opt = app.add_flag(option_names(f))->description(std::string(f.help));
      } else if (f.kind == FlagKind::kList) {
        opt = app.add_option(option_names(f), lists[dest], std::string(f.help))
                  ->allow_extra_args(false)
                  ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      } else {
        opt = app.add_option(option_names(f), values[dest], std::string(f.help))
                  ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      }
      std::string text = f.kind != FlagKind::kBool ? "VALUE" : "";
      if (f.kind != FlagKind::kBool && f.default_value && !f.default_value->empty()) {
        text += " [default: " + std::string(*f.default_value) + "]";
      }
      if (f.pet) text += " [env: " + pet_name(f.dest) + "]";
      opt->option_text(text);
      options[dest] = opt;
    }
    app.footer(
        "SCRIPT [script args...]: the worker program; every word after SCRIPT is passed to it untouched.\n\n"
        "ctrun --status [--json|--stacks] [LOG_DIR|RUN_DIR|HOST:PORT]: print a running job's live table (every\n"
        "rank's collective, time in it, restarts, lag), or its ranks' Python stacks now; start nothing.\n\n"
        "Each worker gets torchrun's environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
        "ROLE_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID, ...\n\n"
        "Environment: PET_<FLAG> sets a flag (precedence: command line, --config file, PET_*, default);\n"
        "CTRUN_LOG_LEVEL (or LOGLEVEL): debug, info, warn, error.\n\n"
        "Exit status: 0 when every worker succeeded; 1 when one failed (with --propagate-exit-code: its exit\n"
        "code, 128+N for signal N); 2 for a bad command line.\n\n"
        "Documentation: docs/cli.md in the sources, /usr/share/doc/ctrun/ when installed.");
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
      throw UsageError("ambiguous option: " + name + " could match " +
                       text::join_with(prefixed, ", ", [](const auto* c) { return dashed_name(c->dest); }));
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
  } catch (const CLI::CallForVersion& e) {
    throw HelpRequested(std::string(e.what()) + "\n");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  CommandLine out;
  for (const auto& f : flag_table()) {
    std::string dest(f.dest);
    auto* opt = lexer.options[dest];
    if (opt->count() == 0) continue;
    if (f.kind == FlagKind::kList) {
      std::string joined;
      for (const auto& v : lexer.lists[dest]) joined += (joined.empty() ? "" : ",") + v;
      out.values[dest] = joined;
      continue;
    }
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

namespace {

// Slurm, MPI or Kubeflow variables, when one of them speaks and the user asked for neither --standalone nor
// hosts of their own: defaults for the flags the user did not give.
std::optional<cluster::DerivedDefaults> derive_from_cluster(const FlagSources& sources, const EnvLookup& env) {
  if (sources.given("hostfile") || sources.given("hosts") || sources.given_true("standalone")) return std::nullopt;
  try {
    return cluster::derive_cluster_defaults(
        env, [&sources](const std::string& dest) { return sources.given(dest); }, sources.given_true("no_slurm"));
  } catch (const cluster::ClusterEnvError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

LaunchConfig parse_command_line(const std::vector<std::string>& args, const EnvLookup& env) {
  CommandLine cli = lex_command_line(args);
  auto file_values = config_file_values(cli, env);
  FlagSources sources(std::move(cli), std::move(file_values), env);
  const auto derived = derive_from_cluster(sources, env);
  if (!derived) return build_launch_config(sources);

  std::map<std::string, FlagText> values;
  for (const auto& [dest, v] : derived->flags) values[dest] = FlagText{v.value, v.from};
  sources.set_derived(std::move(values));
  LaunchConfig c;
  try {
    c = build_launch_config(sources);
  } catch (const UsageError& e) {
    throw UsageError(std::string(e.what()) + "\n  (" + derived->describe() + ")");
  }
  c.cluster_summary = derived->describe();
  if (derived->initial_restart_count)
    c.restarts.initial_restart_count = text::parse_int<int>(derived->initial_restart_count->value).value_or(0);
  return c;
}

}  // namespace ctrun::agent
