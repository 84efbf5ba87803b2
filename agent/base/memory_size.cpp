#include "agent/base/memory_size.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "common/text.hpp"

namespace ctrun::agent {
namespace {

constexpr std::string_view kUnits = "KMGT";

}  // namespace

std::optional<std::uint64_t> parse_memory_size(std::string_view text) {
  const std::string s(text::trim(text));
  if (s.empty() || s.front() == '-' || s.front() == '+') return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(number) || number < 0) return std::nullopt;
  std::string unit = text::lower(text::trim(std::string_view(end)));
  double scale = 1;
  if (!unit.empty() && unit != "b") {
    const auto at = kUnits.find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    const std::string rest = unit.substr(1);
    if (at == std::string_view::npos || !(rest.empty() || rest == "b" || rest == "ib")) return std::nullopt;
    scale = std::pow(1024.0, static_cast<double>(at + 1));
  }
  const double bytes = std::floor(number * scale);
  if (bytes >= 18446744073709551616.0) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  std::size_t unit = 0;
  for (v /= 1024; v >= 1024 && unit + 1 < kUnits.size(); v /= 1024) ++unit;
  return fmt::format("{:.1f} {}iB", v, kUnits[unit]);
}

}  // namespace ctrun::agent
