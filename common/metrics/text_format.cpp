#include "common/metrics/text_format.hpp"

#include <cmath>

#include <fmt/format.h>

namespace ctrun::metrics {
namespace {

// HELP text escapes backslash and newline; label values also the double quote.
std::string escaped(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// Go's ParseFloat reads what fmt writes (shortest round trip), plus the format's own spellings of the specials.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

}  // namespace

std::string to_text(const Families& families) {
  std::string out;
  for (const auto& f : families) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escaped(f.help, false), f.name,
                       f.type == Type::kCounter ? "counter" : "gauge");
    for (const auto& s : f.samples) {
      out += f.name;
      if (!s.labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < s.labels.size(); ++i) {
          out += fmt::format("{}{}=\"{}\"", i ? "," : "", s.labels[i].first, escaped(s.labels[i].second, true));
        }
        out += '}';
      }
      out += ' ';
      out += number(s.value);
      out += '\n';
    }
  }
  return out;
}

}  // namespace ctrun::metrics
