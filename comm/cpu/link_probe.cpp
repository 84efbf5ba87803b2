#include "comm/cpu/link_probe.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/tags.hpp"
#include "store/store.hpp"

namespace ctrun::comm::cpu {
namespace {

using transport::Clock;

// The timing itself, on the two ranks `me` and `peer` (the first host's is `leader`): 8-byte round trips
// (latency: half the fastest) and 1 MiB exchanges ended by a round trip (bandwidth: the median).
algorithms::LinkCost time_link(transport::Messenger& global, bool leader, int peer, Clock::time_point deadline) {
  std::vector<char> big(std::size_t{1} << 20);
  char small[8] = {};
  double rtt = 1e9;
  auto round = [&](std::size_t bytes) {
    const auto t0 = Clock::now();
    if (leader) {
      global.wait(global.post_send(peer, kCostProbeTag, big.data(), bytes), deadline);
      global.wait(global.post_recv(peer, kCostProbeTag, small, sizeof small), deadline);
    } else {
      global.wait(global.post_recv(peer, kCostProbeTag, big.data(), bytes), deadline);
      global.wait(global.post_send(peer, kCostProbeTag, small, sizeof small), deadline);
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Both ranks send 1 MiB at once, as every algorithm's steps send and receive together (a CPU that cannot
  // drive the link both ways at its rate shows here, a one-way send hides it), then a round trip ends the timing.
  std::vector<char> in(big.size());
  auto exchange = [&] {
    const auto t0 = Clock::now();
    global.wait({global.post_send(peer, kCostProbeTag, big.data(), big.size()),
                 global.post_recv(peer, kCostProbeTag, in.data(), in.size())},
                deadline);
    round(8);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (int i = 0; i < 6; ++i) rtt = std::min(rtt, round(8));
  // Untimed: it empties a token-bucket shaper's burst (tc tbf passes its bucket at any speed and refills it only
  // while the link idles: with a 256 KiB bucket a first 1 MiB read 30 % over a 1 Gbit/s cap) and opens TCP's
  // window, so the timed ones see the rate back-to-back transfers get.
  exchange();
  // The median, not the fastest: a rank descheduled between two exchanges leaves the link idle and the shaper's
  // bucket refills, which makes the next one fast (up to 20 % over a 1 Gbit/s cap on a loaded machine).
  std::array<double, 3> bulks{exchange(), exchange(), exchange()};
  std::sort(bulks.begin(), bulks.end());
  const double bulk = bulks[1];
  return {rtt / 2, static_cast<double>(big.size()) / std::max(bulk - rtt, 1e-6)};
}

}  // namespace

algorithms::LinkCost probe_link(const BackendContext& ctx, const algorithms::HostLayout& layout,
                                transport::Messenger& global) {
  const int a = layout.hosts[0][0];
  const int b = layout.hosts[1][0];
  if (ctx.rank == a || ctx.rank == b) {
    const algorithms::LinkCost timed =
        time_link(global, ctx.rank == a, ctx.rank == a ? b : a, Clock::now() + ctx.options.timeout);
    if (ctx.rank == a) {
      char text[64];
      std::snprintf(text, sizeof text, "%.9f %.1f", timed.latency_s, timed.bytes_per_s);
      ctx.store->set("cost/net", text);
    }
  }
  try {
    ctx.store->wait({"cost/net"}, ctx.options.timeout);
  } catch (const store::TimeoutError& e) {
    throw TimeoutError(std::string("comm: the link between hosts was not timed in time: ") + e.what());
  }
  const std::string text = ctx.store->get("cost/net");
  algorithms::LinkCost published;
  if (std::sscanf(text.c_str(), "%lf %lf", &published.latency_s, &published.bytes_per_s) != 2) {
    throw CommError("comm: bad cost/net record '" + text + "' in the group's store");
  }
  return published;
}

}  // namespace ctrun::comm::cpu
