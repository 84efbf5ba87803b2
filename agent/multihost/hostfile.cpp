#include "agent/multihost/hostfile.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/text.hpp"

namespace ctrun::agent::multihost {
namespace {

std::optional<int> small_int(const std::string& text) {
  const auto v = text::parse_int<int>(text);
  if (!v || *v < 0 || *v > (1 << 16)) return std::nullopt;
  return v;
}

void check_name(const std::string& name, const std::string& where) {
  if (name.empty()) throw std::invalid_argument(where + ": empty host name");
  if (name.front() == '-') throw std::invalid_argument(where + ": host name '" + name + "' starts with '-'");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) {
      throw std::invalid_argument(where + ": host name '" + name + "' has a character other than [A-Za-z0-9._-]");
    }
  }
}

void add_unique(std::vector<Host>& hosts, Host h, const std::string& where) {
  for (const auto& other : hosts) {
    if (other.name == h.name) throw std::invalid_argument(where + ": host '" + h.name + "' is listed twice");
  }
  hosts.push_back(std::move(h));
}

// `host1:0,2@host2` -> host -> slots (empty: the whole host).
std::map<std::string, std::vector<int>> parse_filter(const std::string& flag, const std::string& text) {
  std::map<std::string, std::vector<int>> out;
  if (text.empty()) return out;
  for (const auto& item : text::split(text, '@')) {
    auto colon = item.find(':');
    std::string name = item.substr(0, colon);
    check_name(name, flag);
    std::vector<int> slots;
    if (colon != std::string::npos && colon + 1 < item.size()) {
      for (const auto& s : text::split(item.substr(colon + 1), ',')) {
        auto v = small_int(s);
        if (!v) throw std::invalid_argument(flag + ": '" + s + "' in '" + item + "' is not a slot index");
        slots.push_back(*v);
      }
    }
    if (out.count(name)) throw std::invalid_argument(flag + ": host '" + name + "' is named twice");
    out[name] = slots;
  }
  return out;
}

std::vector<int> all_slots(const Host& h) {
  std::vector<int> v;
  if (h.slots) {
    for (int i = 0; i < *h.slots; ++i) v.push_back(i);
  }
  return v;
}

}  // namespace

std::vector<Host> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<Host> hosts;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string where = source + ":" + std::to_string(number);
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    Host h;
    while (words >> word) {
      if (h.name.empty()) {
        check_name(word, where);
        h.name = word;
      } else if (word.rfind("slots=", 0) == 0) {
        auto v = small_int(word.substr(6));
        if (!v || *v == 0) throw std::invalid_argument(where + ": '" + word + "' needs a positive number of slots");
        h.slots = *v;
      } else if (word.rfind("max_slots=", 0) == 0 || word.rfind("max-slots=", 0) == 0) {
        // Open MPI's oversubscription limit: not a launch setting for one agent per host.
      } else {
        throw std::invalid_argument(where + ": unexpected '" + word + "' (expected `host slots=N`)");
      }
    }
    if (!h.name.empty()) add_unique(hosts, std::move(h), where);
  }
  if (hosts.empty()) throw std::invalid_argument(source + ": no host in the hostfile");
  return hosts;
}

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot read the hostfile " + path);
  std::stringstream text;
  text << f.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::vector<Host> parse_host_list(const std::string& text) {
  std::vector<Host> hosts;
  if (text.empty()) return hosts;
  for (const auto& item : text::split(text, ',')) {
    Host h;
    auto colon = item.rfind(':');
    h.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      auto v = small_int(item.substr(colon + 1));
      if (!v || *v == 0) throw std::invalid_argument("--hosts: '" + item + "' should be host or host:slots");
      h.slots = *v;
    }
    check_name(h.name, "--hosts");
    add_unique(hosts, std::move(h), "--hosts");
  }
  if (hosts.empty()) throw std::invalid_argument("--hosts: no host");
  return hosts;
}

std::vector<Host> filter_hosts(std::vector<Host> hosts, const std::optional<std::string>& include,
                               const std::optional<std::string>& exclude) {
  if (include && exclude) throw std::invalid_argument("use either --include or --exclude, not both");
  if (!include && !exclude) return hosts;
  const std::string flag = include ? "--include" : "--exclude";
  auto filter = parse_filter(flag, include ? *include : *exclude);
  for (const auto& [name, slots] : filter) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const Host& h) { return h.name == name; });
    if (it == hosts.end()) throw std::invalid_argument(flag + ": host '" + name + "' is not in the host list");
    if (slots.empty()) continue;
    if (!it->slots) {
      throw std::invalid_argument(flag + ": host '" + name + "' has no slot count (give it `slots=N`)");
    }
    for (int s : slots) {
      if (s >= *it->slots) {
        throw std::invalid_argument(flag + ": slot " + std::to_string(s) + " of '" + name + "' is beyond its " +
                                    std::to_string(*it->slots) + " slots");
      }
    }
  }
  std::vector<Host> out;
  for (auto& h : hosts) {
    auto f = filter.find(h.name);
    if (include) {
      if (f == filter.end()) continue;
      if (!f->second.empty()) {
        std::set<int> chosen(f->second.begin(), f->second.end());
        h.slot_ids.assign(chosen.begin(), chosen.end());
        h.slots_filtered = true;
      }
    } else if (f != filter.end()) {
      if (f->second.empty()) continue;  // the whole host
      std::set<int> drop(f->second.begin(), f->second.end());
      for (int s : all_slots(h)) {
        if (!drop.count(s)) h.slot_ids.push_back(s);
      }
      h.slots_filtered = true;
      if (h.slot_ids.empty()) continue;
    }
    out.push_back(std::move(h));
  }
  if (out.empty()) throw std::invalid_argument(flag + " left no host to run on");
  return out;
}

}  // namespace ctrun::agent::multihost
