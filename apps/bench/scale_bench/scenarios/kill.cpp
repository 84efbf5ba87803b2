// kill -9 of one member's agent (a process of its own) to the next round formed, with a spare: a node beyond MAX
// waits behind the full round (as a hot spare would), so the next round completes at MAX again. The victim's
// connection closes; the master appends it to the round's `lost` key; after the reconnect grace the settlers record
// the death, every member's watch of `over` fires, and every survivor joins the next round with the spare.
#include <signal.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

std::vector<Row> kill_scenario(Job& job) {
  job.spare = std::make_unique<Fleet>(job.fleet_options(job.nodes, 1));
  job.spare->send("join");  // it waits behind the full round
  std::this_thread::sleep_for(std::chrono::seconds(1));
  job.members->send("follow");
  const auto net0 = net_sample(job.master.port());
  const auto before = job.master.sample();
  const auto killed = now_ns();
  for (pid_t pid : job.victim->pids()) ::kill(pid, SIGKILL);
  auto r = job.members->collect();
  const auto survivors_started_ns = r.first_start_ns;  // the spare's join began before the kill: not merged in
  r.merge(job.spare->collect());
  const auto after = job.master.sample();
  job.victim.reset();  // reaped
  auto row = measured("kill -9 -> next round", job.nodes, before, after, net0, net_sample(job.master.port()));
  if (r.failures)
    throw std::runtime_error(fmt::format("{} of {} nodes failed the next round: {}", r.failures, r.nodes, r.error));
  row.seconds = static_cast<double>(r.last_end_ns - killed) * 1e-9;
  row.note = fmt::format("survivors saw the death and started joining after {:.3f} s (reconnect grace 0.5 s)",
                         static_cast<double>(survivors_started_ns - killed) * 1e-9);
  // The next scenario starts on a settled job: every member's liveness moves to the new round (the survivors
  // cancel their watch of the old one and register for the new, the spare registers) just after the round
  // forms, and under load that can come seconds later, inside the next scenario's measurement.
  const auto moved = 2 * static_cast<std::uint64_t>(job.nodes - 2) + 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (job.master.sample().silence_watches - before.silence_watches < moved &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return {row};
}

}  // namespace ctrun::scale_bench
