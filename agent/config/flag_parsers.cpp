#include "agent/config/flag_parsers.hpp"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <optional>

#include "agent/base/command_line.hpp"
#include "agent/base/signal_names.hpp"
#include "common/text.hpp"

namespace ctrun::agent {
namespace {

bool is_digit(char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; }

// Python's int(text): blanks around, one sign, decimal digits with single '_' between two of them.
std::optional<long long> python_int(std::string_view text) {
  text = text::trim(text);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || !is_digit(text.front()) || !is_digit(text.back())) return std::nullopt;
  unsigned long long value = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_') {
      if (!is_digit(text[i + 1])) return std::nullopt;  // "1__0"; a last '_' was refused above
      continue;
    }
    if (!is_digit(text[i])) return std::nullopt;
    value = value * 10 + static_cast<unsigned>(text[i] - '0');
    if (value > static_cast<unsigned long long>(std::numeric_limits<long long>::max())) return std::nullopt;
  }
  const auto v = static_cast<long long>(value);
  return negative ? -v : v;
}

}  // namespace

bool parse_flag_bool(std::string_view text) {
  const std::string word = text::lower(text::trim(text));
  if (word.empty() || word == "false") return false;
  if (word == "true") return true;
  if (auto n = python_int(word)) return *n != 0;
  throw FlagValueError("'" + std::string(text) + "' is not a boolean (an integer as torchrun reads it, 0 false, " +
                       "else true; or true/false)");
}

long long parse_flag_int(std::string_view text, long long min, long long max, std::string_view range) {
  auto n = python_int(text);
  if (!n) throw FlagValueError("invalid int value: '" + std::string(text) + "'");
  if (*n < min || *n > max) throw FlagValueError(std::string(range));
  return *n;
}

double parse_flag_seconds(std::string_view text, bool positive) {
  const std::string s(text::trim(text));
  char* end = nullptr;
  const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || v != v) {
    throw FlagValueError("invalid float value: '" + std::string(text) + "'");
  }
  if (positive && !(v > 0)) throw FlagValueError("must be > 0 seconds");
  if (!(v >= 0)) throw FlagValueError("must be >= 0 seconds");
  return v;
}

std::optional<double> parse_flag_duration(std::string_view text) {
  const std::string s(text::trim(text));
  if (s.empty()) return std::nullopt;
  double unit = 0;
  switch (s.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    default: return std::nullopt;
  }
  const std::string number = s.substr(0, s.size() - 1);
  char* end = nullptr;
  const double v = number.empty() ? 0.0 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !(v > 0) || v * unit > 1e9) {
    throw FlagValueError("invalid duration: '" + s + "' (a positive number with s, m or h: 30s, 5m, 1h)");
  }
  return v * unit;
}

StdSpec parse_std_spec(std::string_view text) {
  // 0-3 for every local rank, or a map of single-digit local ranks like 0:1,1:2 (torchrun's two spellings). Read
  // by hand: compiling a std::regex costs every launch a few hundred microseconds.
  StdSpec spec;
  const std::string s(text);
  auto is_level = [](char c) { return c >= '0' && c <= '3'; };
  if (s.size() == 1 && is_level(s[0])) {
    spec.all = s[0] - '0';
    return spec;
  }
  const auto items = text::split(s, ',');
  for (const auto& item : items) {
    if (item.size() != 3 || item[0] < '0' || item[0] > '9' || item[1] != ':' || !is_level(item[2])) {
      throw FlagValueError("'" + s + "' is neither 0-3 nor a map of single-digit local ranks like 0:1,1:2");
    }
  }
  spec.is_map = true;
  for (const auto& item : items) spec.per_rank[item[0] - '0'] = item[2] - '0';
  return spec;
}

std::vector<int> parse_local_ranks(std::string_view text) {
  std::vector<int> out;
  for (const auto& r : text::split_nonempty(text, ',')) {
    out.push_back(static_cast<int>(parse_flag_int(r, 0, 1 << 16, "local ranks are >= 0")));
  }
  return out;
}

std::vector<int> parse_signal_list(std::string_view text) {
  std::vector<int> out;
  for (const auto& item : text::split(text, ',')) {
    const std::string name(text::trim(item));
    if (name.empty()) continue;
    auto sig = signal_number(name);
    if (!sig) throw FlagValueError("unknown signal '" + name + "' (use names like SIGTERM,SIGUSR1)");
    if (*sig == SIGKILL || *sig == SIGSTOP || *sig == SIGCHLD) throw FlagValueError(name + " cannot be handled");
    out.push_back(*sig);
  }
  return out;
}

std::vector<std::string> parse_module_list(std::string_view text) {
  std::vector<std::string> out;
  for (const auto& m : text::split_nonempty(text, ',')) {
    // A dotted module name: anything else would reach `importlib.import_module` as a surprise.
    const bool valid =
        std::all_of(m.begin(), m.end(),
                    [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.'; }) &&
        !is_digit(m[0]) && m.front() != '.' && m.back() != '.';
    if (!valid) throw FlagValueError("'" + m + "' is not a module name (MODULE[,MODULE...], e.g. torch,numpy)");
    out.push_back(m);
  }
  return out;
}

rdzv::Backend parse_rdzv_backend(std::string_view text) {
  if (text == "etcd-v2") throw UsageError(rdzv::kEtcdV2Refused);
  if (auto backend = rdzv::parse_backend(text)) return *backend;
  throw FlagValueError("unknown backend '" + std::string(text) + "' (static, c10d or etcd)");
}

NumaBinding parse_numa_binding(std::string_view text) {
  if (text == "node") return NumaBinding::kNode;
  // torchrun's other modes follow the topology of each rank's GPU, which ctrun does not read: refused rather than
  // approximated by something else under their name.
  if (text == "socket" || text == "exclusive" || text == "core-complex") {
    throw FlagValueError("'" + std::string(text) +
                         "' is not supported by ctrun (it needs each rank's GPU topology); use node, or --cpu-bind "
                         "core (a disjoint slice of CPUs per rank) or --cpu-bind numa");
  }
  throw FlagValueError("invalid choice: '" + std::string(text) + "' (node; torchrun's socket, exclusive and " +
                       "core-complex are not supported)");
}

CpuBind parse_cpu_bind(std::string_view text) {
  if (text == "none") return CpuBind::kNone;
  if (text == "core") return CpuBind::kCore;
  if (text == "numa") return CpuBind::kNuma;
  throw FlagValueError("invalid choice: '" + std::string(text) + "' (none, core, numa)");
}

}  // namespace ctrun::agent
