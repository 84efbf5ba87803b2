#include "rendezvous/records.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/handler.hpp"

namespace ctrun::rdzv {
namespace {

using nlohmann::json;

template <typename F>
auto decode_json(std::string_view text, const char* what, F&& f) {
  try {
    return f(json::parse(text));
  } catch (const json::exception& e) {
    throw RendezvousError(
        fmt::format("malformed {} record in the rendezvous store ({}): is another program "
                    "using the same --rdzv-id on this store?",
                    what, e.what()));
  }
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::string NodeRecord::describe() const { return fmt::format("{} (pid {})", addr, pid); }

std::string NodeRecord::encode() const {
  return json{{"addr", addr},     {"pid", pid},  {"lws", local_world_size}, {"role", role}, {"sh", store_host},
              {"sp", store_port}, {"k", arrival}}
      .dump();
}

NodeRecord NodeRecord::decode(std::string_view text) {
  return decode_json(text, "node", [](const json& j) {
    NodeRecord r;
    r.addr = j.at("addr").get<std::string>();
    r.pid = j.at("pid").get<std::int64_t>();
    r.local_world_size = j.at("lws").get<int>();
    r.role = j.at("role").get<std::string>();
    r.store_host = j.at("sh").get<std::string>();
    r.store_port = j.at("sp").get<std::uint16_t>();
    r.arrival = j.at("k").get<std::int64_t>();
    return r;
  });
}

std::string Assignment::encode() const {
  return json::array({group_rank, group_world_size, base_global_rank, global_world_size, base_role_rank,
                      role_world_size, master_addr, master_port})
      .dump();
}

Assignment Assignment::decode(std::string_view text) {
  return decode_json(text, "assignment", [](const json& j) {
    Assignment a;
    a.group_rank = j.at(0).get<int>();
    a.group_world_size = j.at(1).get<int>();
    a.base_global_rank = j.at(2).get<int>();
    a.global_world_size = j.at(3).get<int>();
    a.base_role_rank = j.at(4).get<int>();
    a.role_world_size = j.at(5).get<int>();
    a.master_addr = j.at(6).get<std::string>();
    a.master_port = j.at(7).get<std::uint16_t>();
    return a;
  });
}

bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      // Compare digit runs as numbers without overflow: skip leading zeros, then longer run is larger.
      std::size_t si = i, sj = j;
      while (si < a.size() && a[si] == '0') ++si;
      while (sj < b.size() && b[sj] == '0') ++sj;
      std::size_t ei = si, ej = sj;
      while (ei < a.size() && is_digit(a[ei])) ++ei;
      while (ej < b.size() && is_digit(b[ej])) ++ej;
      if (ei - si != ej - sj) return ei - si < ej - sj;
      if (int c = a.substr(si, ei - si).compare(b.substr(sj, ej - sj)); c != 0) return c < 0;
      if (ei - i != ej - j) return ei - i < ej - j;  // "01" vs "1": fewer leading zeros first
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::vector<Assignment> assign_ranks(const std::vector<NodeRecord>& nodes, std::vector<int>* order_out) {
  std::vector<int> order(nodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    const auto& a = nodes[x];
    const auto& b = nodes[y];
    if (natural_less(a.addr, b.addr)) return true;
    if (natural_less(b.addr, a.addr)) return false;
    if (a.pid != b.pid) return a.pid < b.pid;
    return a.arrival < b.arrival;
  });
  std::vector<Assignment> out(nodes.size());
  std::map<std::string, int> role_sizes;
  int world = 0;
  for (const auto& n : nodes) {
    world += n.local_world_size;
    role_sizes[n.role] += n.local_world_size;
  }
  const auto& master = nodes.empty() ? NodeRecord{} : nodes[order.front()];
  std::map<std::string, int> role_base;
  int base = 0;
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    const auto& n = nodes[order[rank]];
    auto& a = out[order[rank]];
    a.group_rank = static_cast<int>(rank);
    a.group_world_size = static_cast<int>(nodes.size());
    a.base_global_rank = base;
    a.global_world_size = world;
    a.base_role_rank = role_base[n.role];
    a.role_world_size = role_sizes[n.role];
    a.master_addr = master.store_host.empty() ? master.addr : master.store_host;
    a.master_port = master.store_port;
    base += n.local_world_size;
    role_base[n.role] += n.local_world_size;
  }
  if (order_out) *order_out = std::move(order);
  return out;
}

RoundInfo round_info(const Assignment& a, std::uint64_t round, std::shared_ptr<store::Store> store) {
  RoundInfo info;
  info.round = round;
  info.group_rank = a.group_rank;
  info.group_world_size = a.group_world_size;
  info.base_global_rank = a.base_global_rank;
  info.global_world_size = a.global_world_size;
  info.base_role_rank = a.base_role_rank;
  info.role_world_size = a.role_world_size;
  info.master_addr = a.master_addr;
  info.master_port = a.master_port;
  info.store = std::move(store);
  return info;
}

}  // namespace ctrun::rdzv
