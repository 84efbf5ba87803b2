#include "store/keyspace_backend.hpp"

#include "store/server.hpp"

namespace ctrun::store::detail {

void KeyspaceBackend::fill(ServerStats& stats) const {
  stats.keys = keyspace_.num_keys();
  stats.bytes = keyspace_.bytes();
  stats.pending_waits = keyspace_.pending_waits();
}

}  // namespace ctrun::store::detail
