#include "agent/logs/line_splitter.hpp"

#include <map>

namespace ctrun::agent {

std::string log_line_prefix(const std::string* tmpl, const std::string& role, int local_rank, int rank,
                            const std::string& hostname) {
  if (tmpl == nullptr) return "[" + role + std::to_string(local_rank) + "]:";
  const std::map<std::string, std::string> vars = {{"role_name", role},
                                                   {"local_rank", std::to_string(local_rank)},
                                                   {"rank", std::to_string(rank)},
                                                   {"hostname", hostname}};
  std::string out;
  const std::string& t = *tmpl;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '$' || i + 1 >= t.size()) {
      out += t[i];
      continue;
    }
    if (t[i + 1] == '$') {  // "$$" is a literal '$'
      out += '$';
      ++i;
      continue;
    }
    std::size_t start = i + 1, end = start;
    bool braced = t[start] == '{';
    if (braced) ++start;
    end = start;
    while (end < t.size() && (std::isalnum(static_cast<unsigned char>(t[end])) || t[end] == '_')) ++end;
    std::string name = t.substr(start, end - start);
    auto it = vars.find(name);
    if (it == vars.end() || (braced && (end >= t.size() || t[end] != '}'))) {
      out += t[i];  // not a known placeholder: keep it literally (safe_substitute)
      continue;
    }
    out += it->second;
    i = braced ? end : end - 1;
  }
  return out;
}

}  // namespace ctrun::agent
