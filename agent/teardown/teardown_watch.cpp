#include "agent/teardown/teardown_watch.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/log.hpp"

namespace ctrun::agent::teardown {
namespace {

// The writers' clock (Python's time.monotonic_ns()).
std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

struct TeardownWatch::Impl {
  Impl(boost::asio::io_context& io, bool on, double bound, std::string dir)
      : enabled(on), bound_s(bound), root(std::move(dir)), timer(io), log(ctrun::log::get("agent")) {}

  bool enabled;
  double bound_s;
  std::string root;
  boost::asio::steady_timer timer;
  std::shared_ptr<spdlog::logger> log;
  std::unique_ptr<ExitRecords> records;
  bool swept = false;
  bool warned = false;
  std::set<int> overdue_ranks;  // handed to `overdue` in this attempt
  std::function<std::vector<Running>()> running;
  Overdue overdue;

  // A quarter of the bound, between 0.1 s and 1 s: a few memory reads per local rank, no system call.
  std::chrono::milliseconds period() const {
    return std::chrono::milliseconds(static_cast<long>(std::clamp(bound_s / 4, 0.1, 1.0) * 1000));
  }

  void schedule() {
    timer.expires_after(period());
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !records) return;
      if (check()) schedule();
    });
  }

  // False once nothing runs any more.
  bool check() {
    const auto workers = running();
    if (workers.empty()) return false;
    const std::int64_t now = monotonic_ns();
    for (const auto& w : workers) {
      if (overdue_ranks.contains(w.local_rank)) continue;
      const ExitRecord r = records->read(w.local_rank);
      if (!r.ended || r.pid != w.pid) continue;
      const double ended_s = static_cast<double>(now - r.ended_ns) / 1e9;
      if (ended_s <= bound_s) continue;
      overdue_ranks.insert(w.local_rank);
      overdue(w, r, ended_s);
    }
    return true;
  }
};

TeardownWatch::TeardownWatch(boost::asio::io_context& io, bool enabled, double bound_s, std::string root)
    : impl_(std::make_unique<Impl>(io, enabled, bound_s, std::move(root))) {}

TeardownWatch::~TeardownWatch() = default;

void TeardownWatch::begin_attempt(std::uint64_t attempt, int local_ranks) {
  Impl& m = *impl_;
  m.timer.cancel();
  m.records.reset();
  m.overdue_ranks.clear();
  if (!m.enabled) return;
  if (!m.swept) {
    m.swept = true;
    for (const auto& path : sweep_stale_exit_records(m.root)) m.log->info("removed {} (left by a killed ctrun)", path);
  }
  try {
    m.records = std::make_unique<ExitRecords>(m.root, static_cast<int>(::getpid()), attempt, local_ranks);
  } catch (const std::exception& e) {
    if (!std::exchange(m.warned, true))
      m.log->warn("a worker that crashes in native teardown after its program ended counts as failed: {}", e.what());
  }
}

void TeardownWatch::add_env(int local_rank, std::map<std::string, std::string>& env) const {
  if (!impl_->records) return;
  for (auto& [k, v] : impl_->records->env_for(local_rank)) env[k] = v;
}

ExitJudgement TeardownWatch::judge(int local_rank, int pid, int exitcode) const {
  if (!impl_->records) return {};
  return judge_exit(impl_->records->read(local_rank), pid, exitcode);
}

void TeardownWatch::watch(std::function<std::vector<Running>()> running, Overdue overdue) {
  Impl& m = *impl_;
  if (!m.records) return;
  m.running = std::move(running);
  m.overdue = std::move(overdue);
  m.schedule();
}

void TeardownWatch::end_attempt() {
  impl_->timer.cancel();
  impl_->records.reset();
}

}  // namespace ctrun::agent::teardown
