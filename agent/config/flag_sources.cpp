#include "agent/config/flag_sources.hpp"

#include <stdexcept>

#include "agent/config/config_file.hpp"
#include "agent/config/flag_parsers.hpp"

namespace ctrun::agent {
namespace {

const FlagSpec& flag_named(std::string_view dest) {
  const FlagSpec* flag = find_flag(dest);
  if (flag == nullptr) throw std::logic_error("no flag named " + std::string(dest) + " in the flag table");
  return *flag;
}

UsageError bad_value(std::string_view dest, const FlagText& value, const char* what) {
  return UsageError("argument " + dashed_name(dest) + (value.origin.empty() ? "" : " (" + value.origin + ")") + ": " +
                    what);
}

}  // namespace

FlagSources::FlagSources(CommandLine cli, std::map<std::string, std::string> file_values, EnvLookup env)
    : cli_(std::move(cli)), file_(std::move(file_values)), env_(std::move(env)) {}

std::optional<FlagText> FlagSources::given(const FlagSpec& flag) const {
  const std::string dest(flag.dest);
  if (auto it = cli_.values.find(dest); it != cli_.values.end()) return FlagText{it->second, ""};
  if (auto it = file_.find(dest); it != file_.end()) return FlagText{it->second, "the --config file"};
  if (flag.pet) {
    if (auto v = env_(pet_name(dest))) return FlagText{*v, pet_name(dest)};
  }
  return std::nullopt;
}

std::optional<std::string> FlagSources::given(std::string_view dest) const {
  auto v = given(flag_named(dest));
  if (!v) return std::nullopt;
  return v->text;
}

bool FlagSources::given_true(std::string_view dest) const {
  auto v = given(flag_named(dest));
  if (!v) return false;
  try {
    return parse_flag_bool(v->text);
  } catch (const FlagValueError& e) {
    throw bad_value(dest, *v, e.what());
  }
}

std::optional<FlagText> FlagSources::resolve(const FlagSpec& flag) const {
  if (auto v = given(flag)) return v;
  if (auto it = derived_.find(std::string(flag.dest)); it != derived_.end()) return it->second;
  if (!flag.fallback_env.empty()) {
    const std::string name(flag.fallback_env);
    if (auto v = env_(name)) return FlagText{*v, name};
  }
  if (flag.default_value) return FlagText{std::string(*flag.default_value), "the default"};
  return std::nullopt;
}

void FlagSources::apply(const FlagSpec& flag, const FlagText& value, LaunchConfig& c) {
  try {
    flag.bind(c, value.text);
  } catch (const FlagValueError& e) {
    throw bad_value(flag.dest, value, e.what());
  } catch (const std::invalid_argument& e) {  // rendezvous' parsers name the flag themselves
    throw UsageError(e.what());
  }
}

std::map<std::string, std::string> config_file_values(const CommandLine& cli, const EnvLookup& env) {
  if (auto it = cli.values.find("config"); it != cli.values.end()) return read_config_file(it->second);
  if (auto path = env(pet_name("config"))) return read_config_file(*path);
  return {};
}

}  // namespace ctrun::agent
