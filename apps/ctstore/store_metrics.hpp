#pragma once
// ctstore's metrics (--metrics-port): the server's counters (store::ServerStats) as Prometheus families. The names
// and their meaning are listed in docs/cli.md ("Metrics").

#include <cstdint>

#include "common/metrics/families.hpp"
#include "store/server.hpp"

namespace ctrun::ctstore {

metrics::Families store_families(const store::ServerStats& stats, std::uint64_t max_connections,
                                 std::uint64_t max_total_bytes);

}  // namespace ctrun::ctstore
