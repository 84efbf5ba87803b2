// A hang across nodes, to group rank 0's agent's verdict, while the job's N nodes sit in their formed round. Two
// nodes of the job (group ranks N/2 and N-1) each run rank 0 of a two-rank group: the first waits inside its
// all_reduce #4, the second never enters it (the culprit). Each of them, and group rank 0, is the agent's real hang
// watch (agent/hang/watch.hpp: the progress region its workers write, the detector, the publish pacer) exchanging
// through the master as HangSupervisor does (agent/hang/exchange.hpp: next_step, run_exchange, take; a tick every
// 0.5 s), each on a connection of its own (in the agent the exchange shares the node's one connection). Workers'
// records are written into the regions as comm writes them. --hang-timeout 2 s (report after 2 s): from the moment
// the records show the wait past 2 s (any node holding both records would give the verdict then) to group rank 0's
// tick giving it. Three hangs per size; the row shows the slowest.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "agent/hang/exchange.hpp"
#include "agent/hang/watch.hpp"
#include "apps/bench/scale_bench/scenario.hpp"
#include "common/progress.hpp"
#include "common/worker_env.hpp"
#include "store/client_loop.hpp"
#include "store/mux_store.hpp"
#include "store/prefix_store.hpp"

namespace ctrun::scale_bench {

namespace {

using namespace std::chrono_literals;
constexpr double kHangTimeout = 2;
constexpr int kLocalRanks = 8;
constexpr std::uint32_t kAllReduce = 2;  // comm's op kind

// Plays local rank 0 of a node in its watch's region: rank `group_rank` of two-rank group `group_id`, 4 all_reduces
// done, then (when `enter`) inside the fifth.
void play_worker(const std::string& region, std::uint64_t group_id, int global_rank, int group_rank, bool enter) {
  const int fd = ::open(region.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("scale_bench: cannot open the progress region " + region);
  const std::size_t bytes = progress::region_bytes(kLocalRanks);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error("scale_bench: cannot map the progress region " + region);
  progress::Slot& slot = progress::row_of(static_cast<progress::RegionHeader*>(p), 0)->slots[0];
  slot.identity.pid.store(static_cast<int>(::getpid()));
  progress::begin_write(slot.identity);
  slot.identity.group_id.store(group_id);
  slot.identity.global_rank.store(global_rank);
  slot.identity.group_rank.store(group_rank);
  slot.identity.group_size.store(2);
  progress::end_write(slot.identity);
  progress::SlotWriter w(&slot);
  for (int i = 0; i < 4; ++i) {
    w.issued(i, kAllReduce, 0, 16);
    w.running(i, kAllReduce, 0, 16);
    w.finished(true);
  }
  if (enter) {
    w.issued(4, kAllReduce, 0, 16);
    w.running(4, kAllReduce, 0, 16);
  }
  ::munmap(p, bytes);
}

// One node's agent as far as hangs go: its watch, ticked and exchanging as HangSupervisor does.
struct HangAgent {
  int group_rank = 0;
  std::unique_ptr<agent::hang::HangWatch> watch;
  std::shared_ptr<store::Store> store;
  double last_read = -1e9;
};

}  // namespace

std::vector<Row> hang_scenario(Job& job) {
  const int n = job.nodes;
  const auto shm = std::filesystem::temp_directory_path() / fmt::format("scale_bench_hang_{}", ::getpid());
  std::filesystem::create_directories(shm);
  auto loop = std::make_shared<store::ClientLoop>();
  store::MuxStore::Options o;
  o.host = "127.0.0.1";
  o.port = job.master.port();
  o.timeout = 60s;
  std::vector<HangAgent> agents(3);
  const int ranks[3] = {0, n / 2, n - 1};  // group rank 0, the waiter's node, the culprit's node
  for (int i = 0; i < 3; ++i) {
    agent::hang::WatchConfig wc;
    wc.detector.report_after_s = kHangTimeout;
    wc.detector.hang_timeout_s = kHangTimeout;
    wc.host = fmt::format("node{}", ranks[i]);
    wc.agent_pid = 1'000'000 + i;  // distinct region names in our own directory
    wc.local_ranks = kLocalRanks;
    wc.shm_dir = shm.string();
    agents[i].group_rank = ranks[i];
    agents[i].watch = std::make_unique<agent::hang::HangWatch>(wc);
    agents[i].store = std::make_shared<store::PrefixStore>(fmt::format("/{}/hang/", job.run_id),
                                                           std::make_shared<store::MuxStore>(o, loop));
  }
  const auto epoch = std::chrono::steady_clock::now();
  const auto clock = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count(); };

  std::vector<double> delays;
  std::string detail;
  const auto net0 = net_sample(job.master.port());
  const auto before = job.master.sample();
  for (int trial = 0; trial < 3; ++trial) {
    for (auto& a : agents) a.watch->begin_attempt(trial + 1, trial);
    // The workers the two nodes' watches read (local rank 0 each; no stack file: nobody is sent a dump signal).
    for (int i = 1; i < 3; ++i)
      agents[i].watch->set_workers({{0, ranks[i] * kLocalRanks, static_cast<int>(::getpid()), ""}});
    std::atomic<bool> stop{false};
    std::mutex mutex;
    double verdict_at = -1, published_at[3] = {-1, -1, -1}, read_at = -1;
    double hang_at = -1;
    // Each agent's loop: tick every 0.5 s, then its exchange (inline: the real agent's lane runs it beside the next
    // tick, so this is no faster).
    std::vector<std::thread> loops;
    for (int i = 0; i < 3; ++i) {
      loops.emplace_back([&, i] {
        auto& a = agents[i];
        while (!stop) {
          const double t = clock();
          const auto out = a.watch->tick(t);
          if (i == 0) {
            for (const auto& h : out.findings.hangs) {
              if (h.kind != agent::hang::HangFinding::Kind::kVerdict) continue;
              std::lock_guard lock(mutex);
              if (verdict_at < 0) verdict_at = t;
            }
          }
          const auto step = agent::hang::next_step(*a.watch, t, a.group_rank, n, true, a.last_read);
          if (step.any()) {
            agent::hang::ExchangeResult got;
            try {
              got = agent::hang::run_exchange(*a.store, a.group_rank, n, step);
            } catch (const std::exception&) {
            }
            const double t2 = clock();
            agent::hang::take(*a.watch, got, t2);
            std::lock_guard lock(mutex);
            if (hang_at >= 0 && !step.summary.empty() && published_at[i] < 0) published_at[i] = t;
            if (i == 0 && hang_at >= 0 && got.summaries.size() && read_at < 0) read_at = t2;
          }
          std::this_thread::sleep_for(500ms);
        }
      });
    }
    // Let them settle (every node has published its first summary), then a hang at a random phase of their ticks.
    std::this_thread::sleep_for(std::chrono::milliseconds(3000 + 317 * trial));
    const std::uint64_t group = 7000 + trial;
    {
      std::lock_guard lock(mutex);
      hang_at = clock();
    }
    play_worker(agents[1].watch->env_for(0, "")[worker_env::kProgressFile], group, ranks[1] * kLocalRanks, 0, true);
    play_worker(agents[2].watch->env_for(0, "")[worker_env::kProgressFile], group, ranks[2] * kLocalRanks, 1, false);
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      {
        std::lock_guard lock(mutex);
        if (verdict_at >= 0) break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(20ms);
    }
    stop = true;
    for (auto& t : loops) t.join();
    for (auto& a : agents) a.watch->end_attempt();
    if (verdict_at < 0) throw std::runtime_error("hang: no verdict at group rank 0's agent within 30 s of the hang");
    const double due = hang_at + kHangTimeout;
    delays.push_back(verdict_at - due);
    if (trial == 0)
      detail = fmt::format(
          "hang 1: the two nodes published +{:.2f}/+{:.2f} s after it began, rank 0 read them +{:.2f} s, "
          "verdict +{:.2f} s",
          published_at[1] - hang_at, published_at[2] - hang_at, read_at - hang_at, verdict_at - hang_at);
  }
  const auto after = job.master.sample();
  std::filesystem::remove_all(shm);
  auto row = measured("hang verdict at group rank 0", n, before, after, net0, net_sample(job.master.port()));
  row.seconds = *std::max_element(delays.begin(), delays.end());
  row.note = fmt::format("verdict held after it was due (--hang-timeout 2 s): {:.2f} / {:.2f} / {:.2f} s; {}",
                         delays[0], delays[1], delays[2], detail);
  return {row};
}

}  // namespace ctrun::scale_bench
