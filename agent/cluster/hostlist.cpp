#include "agent/cluster/hostlist.hpp"

#include <cctype>
#include <stdexcept>

namespace ctrun::agent::cluster {
namespace {

[[noreturn]] void bad(const std::string& list, const std::string& what) {
  throw std::invalid_argument("invalid Slurm hostlist '" + list + "': " + what);
}

// Splits on commas outside brackets.
std::vector<std::string> split_top_level(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') {
      if (++depth > 1) bad(list, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) bad(list, "']' without '['");
    }
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) bad(list, "'[' without ']'");
  out.push_back(cur);
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The values of one bracket body `01-04,07`, as text with the lower bound's width.
std::vector<std::string> bracket_values(const std::string& list, const std::string& body) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma - start);
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18) {
      bad(list, "'" + item + "' is not a number or a range N-M");
    }
    unsigned long long a = std::stoull(lo), b = std::stoull(hi);
    if (a > b) bad(list, "range '" + item + "' goes down");
    if (b - a >= kMaxHosts) bad(list, "range '" + item + "' has more than " + std::to_string(kMaxHosts) + " hosts");
    for (unsigned long long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(std::move(digits));
      if (out.size() > kMaxHosts) bad(list, "more than " + std::to_string(kMaxHosts) + " hosts");
    }
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Appends every expansion of `item` (text with bracket groups) to `out`, in Slurm's order: the last group varies
// fastest, then the first, the second, ... (`a[1-2]b[3-4]c[5-6]` -> a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...), as
// `scontrol show hostnames` prints it.
void expand_item(const std::string& list, const std::string& item, std::vector<std::string>& out) {
  std::vector<std::string> texts;                // text before group 0, between groups, after the last
  std::vector<std::vector<std::string>> groups;  // the values of each bracket group
  size_t pos = 0;
  while (true) {
    size_t open = item.find('[', pos);
    if (open == std::string::npos) break;
    size_t close = item.find(']', open);
    if (close == std::string::npos) bad(list, "'[' without ']'");
    texts.push_back(item.substr(pos, open - pos));
    groups.push_back(bracket_values(list, item.substr(open + 1, close - open - 1)));
    pos = close + 1;
  }
  texts.push_back(item.substr(pos));
  const size_t n = groups.size();
  std::vector<size_t> order;  // odometer digits, fastest first
  if (n > 0) order.push_back(n - 1);
  for (size_t g = 0; g + 1 < n; ++g) order.push_back(g);
  std::vector<size_t> idx(n, 0);
  while (true) {
    std::string host = texts[0];
    for (size_t g = 0; g < n; ++g) host += groups[g][idx[g]] + texts[g + 1];
    out.push_back(std::move(host));
    if (out.size() > kMaxHosts) bad(list, "more than " + std::to_string(kMaxHosts) + " hosts");
    size_t k = 0;
    for (; k < order.size(); ++k) {
      size_t g = order[k];
      if (++idx[g] < groups[g].size()) break;
      idx[g] = 0;
    }
    if (k == order.size()) return;
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  for (const auto& item : split_top_level(list)) {
    if (item.empty()) continue;  // "a,,b" and a trailing comma: Slurm skips them too
    if (item.find_first_of(" \t\n") != std::string::npos) bad(list, "white space in '" + item + "'");
    expand_item(list, item, out);
  }
  if (out.empty()) bad(list, "no host");
  return out;
}

std::string first_host(const std::string& list) { return expand_hostlist(list).front(); }

}  // namespace ctrun::agent::cluster
