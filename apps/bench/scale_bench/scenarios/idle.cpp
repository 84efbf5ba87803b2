// A formed round left alone: the members' heartbeats (keep_alive_interval 5 s, torchrun's default) and their
// watches (the round's `lost` and `over` keys, waits pending on the master) are all the master sees. Its requests per
// second and its share of one core over the window (default three heartbeat intervals), after a beat interval and a
// second of settling (the members' first looks at their watched ranks, until each has beaten once, belong to the
// round's start, not to its steady state).
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

std::vector<Row> idle_scenario(Job& job) {
  std::this_thread::sleep_for(std::chrono::seconds(6));
  const auto net0 = net_sample(job.master.port());
  const auto before = job.master.sample();
  std::this_thread::sleep_for(std::chrono::duration<double>(job.options.idle_window_s));
  const auto after = job.master.sample();
  auto row = measured("idle (formed round)", job.nodes, before, after, net0, net_sample(job.master.port()));
  row.window_s = static_cast<double>(after.at_ns - before.at_ns) * 1e-9;
  row.note = fmt::format("{:.2f} requests/node/s", static_cast<double>(row.requests) / *row.window_s / job.nodes);
  return {row};
}

}  // namespace ctrun::scale_bench
