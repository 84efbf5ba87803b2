#pragma once
// Point-to-point tags. Users' send/recv take tags 0 .. kMaxUserTag; the tags above it, up to INT_MAX, carry
// comm's own point-to-point protocols (monitored_barrier), so a user's message can never be matched by one of
// them or take one of theirs. Collectives need none of these: their tags have bit 63 set (transport/messenger.hpp).

#include <climits>

namespace ctrun::comm {

inline constexpr int kFirstReservedTag = INT_MAX - 15;
inline constexpr int kMaxUserTag = kFirstReservedTag - 1;

// monitored_barrier: every rank tells rank 0 it arrived, rank 0 then releases them.
inline constexpr int kMonitoredBarrierArriveTag = kFirstReservedTag;
inline constexpr int kMonitoredBarrierReleaseTag = kFirstReservedTag + 1;

// Two-level groups: the first two hosts' lowest ranks time a few messages between them when the group is
// created (the cost model's latency and bandwidth between hosts, comm/cpu/link_probe.cpp).
inline constexpr int kCostProbeTag = kFirstReservedTag + 2;

}  // namespace ctrun::comm
