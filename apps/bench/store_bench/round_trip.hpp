#pragma once
// Round-trip throughput: N client threads, each with its own connection (our TcpStore, legacy dialect so that
// torch 1.13's server understands it), issuing one operation back to back for a fixed time.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace ctrun::bench {

enum class Op {
  kAdd,     // ADD key 1 -> i64: 1 round trip
  kSetGet,  // SET (no reply) + get() = WAIT + GET: 3 requests, 2 round trips, counted as one op
  kCheck,   // CHECK [key] -> u8: 1 round trip
};

const char* op_name(Op op);

struct RoundTripResult {
  double ops_per_second = 0;        // aggregate over all connections
  double server_cpu_us_per_op = 0;  // server CPU time (user + system) per op over the same interval
  double client_cpu_us_per_op = 0;  // this process's CPU time per op (all client threads)
};

// One op counter per client thread, on its own cache line: a shared counter would measure cache-line ping-pong.
struct alignas(64) OpCounter {
  std::atomic<std::uint64_t> n{0};
};

// The measured interval shared by both load generators: waits `warmup` while the clients run, then counts ops and
// server/client CPU time over `duration`. The caller stops and joins its clients afterwards.
RoundTripResult measure_window(const std::vector<OpCounter>& counts, const std::function<double()>& server_cpu_seconds,
                               std::chrono::milliseconds warmup, std::chrono::milliseconds duration);

// Runs `connections` clients for warmup + duration against the server at `port`, whose CPU time
// server_cpu_seconds() reports. Throws if a client fails.
RoundTripResult measure_round_trips(std::uint16_t port, const std::function<double()>& server_cpu_seconds, Op op,
                                    int connections, std::chrono::milliseconds warmup,
                                    std::chrono::milliseconds duration);

}  // namespace ctrun::bench
