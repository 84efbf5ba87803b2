#include "agent/base/signal_names.hpp"
#include "common/text.hpp"

#include <charconv>
#include <csignal>
#include <cstring>

namespace ctrun::agent {

std::string signal_name(int signum) {
  if (signum >= SIGRTMIN && signum <= SIGRTMAX) {
    // Python names the real-time range SIGRTMIN, SIGRTMIN+n ... SIGRTMAX.
    if (signum == SIGRTMIN) return "SIGRTMIN";
    if (signum == SIGRTMAX) return "SIGRTMAX";
    return "SIGRTMIN+" + std::to_string(signum - SIGRTMIN);
  }
  const char* abbrev = sigabbrev_np(signum);
  if (abbrev == nullptr) return "SIG" + std::to_string(signum);
  return std::string("SIG") + abbrev;
}

std::optional<int> signal_number(std::string_view name) {
  if (const auto value = text::parse_int<int>(name)) {
    if (*value > 0 && *value < NSIG) return value;
    return std::nullopt;
  }
  std::string_view bare = name.substr(0, 3) == "SIG" ? name.substr(3) : name;
  for (int s = 1; s < SIGRTMIN; ++s) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev != nullptr && bare == abbrev) return s;
  }
  return std::nullopt;
}

}  // namespace ctrun::agent
