#pragma once
// Signal names as Python's signal.Signals spells them ("SIGSEGV"), both ways.

#include <optional>
#include <string>
#include <string_view>

namespace ctrun::agent {

std::string signal_name(int signum);                      // "SIGSEGV"; "SIG<n>" when unknown
std::optional<int> signal_number(std::string_view name);  // "SIGTERM" or "TERM" or "15"

}  // namespace ctrun::agent
