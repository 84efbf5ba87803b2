// The same handlers over the etcd backend (EtcdStore on an etcd cluster, e.g. 3 members from with_etcd.sh), made as
// create_handler() makes them (one run lease, a client per handler), as one agent group in this process: one round
// at each of --sizes up to 1024. The master here is etcd: its CPU is not measured; the HTTP bytes are.
#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_lease.hpp"
#include "rendezvous/etcd/etcd_store.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::scale_bench {

using namespace std::chrono_literals;

std::vector<Row> etcd_rounds(const BenchOptions& options) {
  std::vector<Row> rows;
  if (options.etcd_endpoints.empty()) return rows;
  const auto salt = std::chrono::steady_clock::now().time_since_epoch().count();  // fresh run ids per bench run
  for (int n : options.sizes) {
    if (n > 1024) continue;
    const auto run_id = fmt::format("e{}.{}", n, salt);
    rdzv::RendezvousParameters p;
    p.backend = "etcd";
    p.endpoint = options.etcd_endpoints;
    p.config = {{"read_timeout", "120"}, {"lease_ttl", "60"}};
    auto eo = rdzv::etcd::parse_options(p);
    auto lease = std::make_shared<rdzv::etcd::RunLease>(
        std::make_shared<rdzv::etcd::Client>(eo), rdzv::etcd::EtcdStore::to_etcd(rdzv::Keys(run_id).lease()), 60s);
    GroupSpec spec{run_id, n, n, 0, n, options.threads};
    AgentGroup group(
        spec,
        [eo, lease] {
          return std::make_shared<rdzv::etcd::EtcdStore>(std::make_shared<rdzv::etcd::Client>(eo), lease, 120s);
        },
        "etcd");
    const auto before = rdzv::etcd::wire_bytes();
    auto r = group.join();
    const auto wire = rdzv::etcd::wire_bytes() - before;
    group.shutdown();
    if (r.failures)
      throw std::runtime_error(fmt::format("etcd: {} of {} nodes failed the round: {}", r.failures, r.nodes, r.error));
    Row row;
    row.scenario = "round (etcd backend)";
    row.nodes = n;
    row.seconds = static_cast<double>(r.last_end_ns - r.first_start_ns) * 1e-9;
    row.note = fmt::format("{} HTTP bytes/node; etcd at {}", wire / n, options.etcd_endpoints);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace ctrun::scale_bench
