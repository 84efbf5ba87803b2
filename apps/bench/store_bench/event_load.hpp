#pragma once
// Round-trip throughput with a cheap client: one (or a few) threads drive all N connections through epoll,
// so that on a small machine the client does not eat the CPU the server needs and the figures show the
// server's own cost. Semantics stay round trip: each connection has exactly one request outstanding and
// sends the next only after the reply arrived (no pipelining within a connection). Requests are the legacy
// dialect's bytes from protocol::encode_request, with the keys our TcpStore would send; replies are parsed
// by their length and checked (ADD counts up, GET returns the value, CHECK says READY).

#include <chrono>
#include <cstdint>
#include <functional>

#include "apps/bench/store_bench/round_trip.hpp"

namespace ctrun::bench {

// Same measurement and result as measure_round_trips, with `threads` event-loop threads sharing the
// connections (round robin). Throws if a connection fails or a reply is wrong.
RoundTripResult measure_event_driven(std::uint16_t port, const std::function<double()>& server_cpu_seconds, Op op,
                                     int connections, int threads, std::chrono::milliseconds warmup,
                                     std::chrono::milliseconds duration);

}  // namespace ctrun::bench
