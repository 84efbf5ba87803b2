#pragma once
// The link between hosts, timed once when a two-level group is created (two_level.hpp) and CTRUN_COMM_NET_LATENCY_US
// or CTRUN_COMM_NET_MBPS leaves it to be measured: the lowest ranks of the first two hosts exchange a few messages
// over the group's tcp messenger and publish the latency and bandwidth in the group's store, so that every rank
// prices the cross level alike (cost_model.hpp).

#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/two_level.hpp"
#include "comm/backend.hpp"
#include "comm/transport/messenger.hpp"

namespace ctrun::comm::cpu {

// Every rank of the group calls it (before the backend's worker starts: `global`'s only user then); the two timing
// ranks exchange, every rank reads the published record. Throws TimeoutError when the record is not there within
// the group's timeout.
algorithms::LinkCost probe_link(const BackendContext& ctx, const algorithms::HostLayout& layout,
                                transport::Messenger& global);

}  // namespace ctrun::comm::cpu
