#include "apps/ctstore/store_metrics.hpp"

namespace ctrun::ctstore {

metrics::Families store_families(const store::ServerStats& s, std::uint64_t max_connections,
                                 std::uint64_t max_total_bytes) {
  using metrics::counter;
  using metrics::gauge;
  auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  metrics::Families out;
  auto& requests = out.emplace_back(counter("ctstore_requests_total", "Requests decoded, by command."));
  for (const auto& [command, n] : s.ops) requests.add(d(n), {{"command", command}});
  out.push_back(counter("ctstore_received_bytes_total", "Bytes read from clients.").add(d(s.bytes_in)));
  out.push_back(counter("ctstore_sent_bytes_total", "Bytes written to clients.").add(d(s.bytes_out)));
  out.push_back(gauge("ctstore_connections", "Client connections open.").add(d(s.connections_open)));
  out.push_back(
      counter("ctstore_connections_accepted_total", "Client connections accepted.").add(d(s.connections_accepted)));
  out.push_back(gauge("ctstore_connections_max",
                      "The connection cap (--max-connections, or what the descriptor "
                      "limit allows).")
                    .add(d(max_connections)));
  auto& refused = out.emplace_back(
      counter("ctstore_refused_total",
              "Connections turned away or closed for a limit or a bad request, by reason (docs/cli.md lists them)."));
  for (const auto& [reason, n] : s.refused) refused.add(d(n), {{"reason", reason}});
  out.push_back(gauge("ctstore_keys", "Keys held.").add(d(s.keys)));
  out.push_back(gauge("ctstore_key_value_bytes", "Bytes of keys and values held.").add(d(s.bytes)));
  out.push_back(gauge("ctstore_waiters", "Pending WAITs and BARRIERs (clients blocked until keys appear).")
                    .add(d(s.pending_waits)));
  out.push_back(gauge("ctstore_held_bytes",
                      "Memory held for clients: keys, values, registrations and buffered requests and replies "
                      "(what --max-total-bytes bounds).")
                    .add(d(s.held_bytes)));
  out.push_back(gauge("ctstore_held_bytes_limit", "--max-total-bytes.").add(d(max_total_bytes)));
  return out;
}

}  // namespace ctrun::ctstore
