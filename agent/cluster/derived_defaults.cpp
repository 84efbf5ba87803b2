#include "agent/cluster/derived_defaults.hpp"

namespace ctrun::agent::cluster {

void DerivedDefaults::derive(const GivenLookup& given, const std::string& dest, std::string value, std::string from) {
  if (given(dest)) return;
  flags[dest] = DerivedValue{std::move(value), std::move(from)};
}

std::string DerivedDefaults::describe() const {
  std::string out = "ctrun: from " + source + ":";
  bool first = true;
  auto item = [&](const std::string& text) {
    out += first ? " " : ", ";
    out += text;
    first = false;
  };
  for (const auto& [dest, v] : flags) {
    std::string flag = "--";
    for (char c : dest) flag += c == '_' ? '-' : c;
    item(flag + " " + v.value + " (" + v.from + ")");
  }
  if (initial_restart_count) {
    item("TORCHELASTIC_RESTART_COUNT starts at " + initial_restart_count->value + " (" + initial_restart_count->from +
         ")");
  }
  if (first) item("nothing derived");
  for (const auto& n : notes) out += "; " + n;
  return out;
}

}  // namespace ctrun::agent::cluster
