#include "agent/hang/supervisor.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/hang/exchange.hpp"
#include "agent/hang/region.hpp"
#include "agent/hang/stacks.hpp"
#include "agent/hang/watch.hpp"
#include "agent/hang/wording.hpp"
#include "agent/process/worker_group.hpp"
#include "agent/process/worker_process.hpp"
#include "agent/report/error_file.hpp"
#include "common/hostname.hpp"
#include "common/log.hpp"

namespace ctrun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string stack_file_of(const Worker& w) {
  return w.error_file.empty() ? "" : (std::filesystem::path(w.error_file).parent_path() / "stacks.txt").string();
}

}  // namespace

struct HangSupervisor::Impl {
  Impl(boost::asio::io_context& io, const LaunchConfig& c, WorkerGroup& g, EventLog& ev, HelperLane& l,
       std::function<bool()> r)
      : io(io),
        config(c),
        group(g),
        events(ev),
        lane(l),
        running(std::move(r)),
        log(ctrun::log::get("agent")),
        timer(io) {}

  boost::asio::io_context& io;
  const LaunchConfig& config;
  WorkerGroup& group;
  EventLog& events;
  HelperLane& lane;
  std::function<bool()> running;
  std::shared_ptr<spdlog::logger> log;
  boost::asio::steady_timer timer;
  std::unique_ptr<hang::HangWatch> watch;
  // request_stacks(): the requests waiting for the open on-demand dump, answered by a tick (or when the attempt or
  // the agent ends; the live view answers 503 for one that waits past its reply timeout, 10 s).
  std::vector<std::function<void(std::string)>> stack_waiters;
  SteadyClock::time_point epoch = SteadyClock::now();
  std::uint64_t attempt = 0;  // the attempt being watched; 0: none
  rdzv::RoundInfo round;
  bool exchange_busy = false;
  std::map<int, std::string> stragglers;  // group ordinal -> the latest straggler line of that group
  struct Listener {
    std::function<void(const hang::HangWatch&)> call;
    bool ticks_only = false;
  };
  std::vector<Listener> tick_listeners;
  double last_read = -1e9;  // group rank 0's reads; a stalled node's reads of the verdicts (hang::next_step)

  ~Impl() { answer_stack_waiters("ctrun is ending\n"); }

  void tell_listeners(bool attempt_ended) {
    for (const auto& listener : tick_listeners)
      if (!attempt_ended || !listener.ticks_only) listener.call(*watch);
  }

  double now() const { return std::chrono::duration<double>(SteadyClock::now() - epoch).count(); }
  bool watching(std::uint64_t a) const { return a != 0 && a == attempt && running(); }

  void make_watch() {
    for (const auto& path : hang::sweep_stale_regions()) log->info("removed {} (left by a killed ctrun)", path);
    hang::WatchConfig wc;
    wc.detector.report_after_s = config.hang.report_after;
    wc.detector.hang_timeout_s = config.hang.timeout;
    if (config.hang.timeout_auto) {
      wc.auto_timeout = hang::AutoTimeout{.floor_s = config.hang.timeout_auto->floor_s,
                                          .ceiling_s = config.hang.timeout_auto->ceiling_s};
    }
    wc.detector.straggler_every_s = config.hang.straggler_interval;
    wc.host = host::short_name();
    wc.agent_pid = static_cast<int>(::getpid());
    wc.local_ranks = std::max(config.workers.nproc_per_node, 1);
    watch = std::make_unique<hang::HangWatch>(wc);
    WorkerHooks hooks;
    hooks.before_start = [this](const Worker& w, std::map<std::string, std::string>& worker_env) {
      const std::string stacks = stack_file_of(w);
      for (auto& [k, v] : watch->env_for(w.local_rank, stacks)) worker_env[k] = v;
      // ctrun's sitecustomize.py (stack dumps with no code in the worker) is first on every worker's PYTHONPATH
      // already: agent/launch/worker_invocation.cpp (python_dirs()), so that preloaded and cold workers get the same.
    };
    hooks.after_start = [this](const std::vector<Worker>& workers) {
      std::vector<hang::LocalWorker> local;
      for (const auto& w : workers) {
        if (w.pid > 0) local.push_back({w.local_rank, w.global_rank, static_cast<int>(w.pid), stack_file_of(w)});
      }
      watch->set_workers(std::move(local));
    };
    group.add_hooks(std::move(hooks));
  }

  void answer_stack_waiters(const std::string& text) {
    for (auto& answer : stack_waiters) answer(text);
    stack_waiters.clear();
  }

  // On the loop: the watch asks every rank for its stack, and a later tick answers (at most dump_wait_s, 2 s, after
  // the request).
  void stacks_on_demand(std::function<void(std::string)> answer) {
    if (!watching(attempt)) {
      answer("no workers are running on this node (between attempts, or before the first)\n");
      return;
    }
    stack_waiters.push_back(std::move(answer));
    watch->request_stacks(now());
  }

  // Twice a second while the attempt runs.
  void schedule_tick() {
    timer.expires_after(std::chrono::milliseconds(500));
    timer.async_wait([this, a = attempt](const boost::system::error_code& ec) {
      if (ec || !watching(a)) return;
      tick();
      schedule_tick();
    });
  }

  void tick() {
    const double t = now();
    hang::WatchOutput out = watch->tick(t);
    say(out);
    if (out.requested_stacks) {
      answer_stack_waiters(
          hang::requested_stacks_words(*out.requested_stacks, watch->config().host, watch->config().dump_wait_s));
    }
    tell_listeners(false);
    exchange(t);
    for (const auto& failure : out.failures) fail(failure);
  }

  // What the tick found: the log, the console, the event log, and the stragglers the failure summary names.
  void say(const hang::WatchOutput& out) {
    for (const auto& s : hang::say(out, watch->ranks(), watch->detector().config())) {
      if (s.warning) {
        log->warn("{}", s.line);
      } else {
        log->info("{}", s.line);
      }
      events.emit(s.event, s.fields);
    }
    for (const auto& s : out.findings.stragglers) stragglers[s.group_ordinal] = hang::describe(s);
    for (const auto& stack : out.stacks) log->warn("{}", hang::stack_words(stack));
  }

  // A verdict's culprit of this node: its error file, then SIGKILL; its exit is a failure like any other, so the
  // restart policy applies.
  void fail(const hang::Failure& failure) {
    const std::string note = hang::failure_note(failure, watch->ranks(), watch->detector().config());
    for (const auto& w : group.workers()) {
      if (w.local_rank != failure.worker.local_rank || !w.running) continue;
      write_hang_error_file(w.error_file, "hang: " + note, failure.stack);
      log->error("treating rank {} (pid {}) as failed: {}", w.global_rank, w.pid, note);
      events.emit(Event::kHangFailed, {{"rank", w.global_rank}, {"local_rank", w.local_rank}, {"pid", w.pid}});
      signal_group(w.pid, SIGKILL);
    }
  }

  // Several nodes (exchange.hpp, next_step): this node's summary when due, group rank 0's reads and verdicts, the
  // others' reads of them. One exchange at a time, on the helper lane.
  void exchange(double t) {
    if (round.group_world_size <= 1 || !round.store || exchange_busy) return;
    const bool verdicts_fail = config.hang.timeout > 0 || config.hang.timeout_auto.has_value();
    const hang::ExchangeStep step =
        hang::next_step(*watch, t, round.group_rank, round.group_world_size, verdicts_fail, last_read);
    if (!step.any()) return;
    exchange_busy = true;
    lane.run(BlockingCall::kProgress,
             [this, store = round.store, step, me = round.group_rank, nodes = round.group_world_size,
              a = attempt]() -> HelperLane::Continuation {
               hang::ExchangeResult got;
               try {
                 got = hang::run_exchange(*store, me, nodes, step);
               } catch (const std::exception& e) {
                 log->debug("progress summary exchange failed: {}", e.what());
               }
               return [this, got = std::move(got), a]() {
                 exchange_busy = false;
                 if (!watching(a)) return;
                 hang::take(*watch, got, now());
               };
             });
  }
};

HangSupervisor::HangSupervisor(boost::asio::io_context& io, const LaunchConfig& config, WorkerGroup& group,
                               EventLog& events, HelperLane& lane, std::function<bool()> running)
    : impl_(std::make_unique<Impl>(io, config, group, events, lane, std::move(running))) {
  impl_->make_watch();
}

HangSupervisor::~HangSupervisor() = default;

void HangSupervisor::begin_attempt(std::uint64_t attempt_seq, int restart_count) {
  impl_->attempt = 0;
  try {
    impl_->watch->begin_attempt(static_cast<int>(attempt_seq), restart_count);
  } catch (const std::exception& e) {
    impl_->log->warn("hang detection is off for this attempt: {}", e.what());
  }
  impl_->attempt = attempt_seq;
}

void HangSupervisor::attempt_started(const rdzv::RoundInfo& round) {
  impl_->round = round;
  impl_->schedule_tick();
}

void HangSupervisor::end_attempt() {
  impl_->timer.cancel();
  impl_->attempt = 0;
  impl_->watch->end_attempt();  // the attempt's region goes: its workers are gone
  impl_->answer_stack_waiters("the attempt ended before every stack came in\n");
  impl_->tell_listeners(true);
}

void HangSupervisor::on_tick(std::function<void(const hang::HangWatch& watch)> listener, bool ticks_only) {
  impl_->tick_listeners.push_back({std::move(listener), ticks_only});
}

void HangSupervisor::request_stacks(std::function<void(std::string text)> answer) {
  impl_->stacks_on_demand(std::move(answer));
}

const hang::HangWatch& HangSupervisor::watch() const { return *impl_->watch; }

void HangSupervisor::stop() { impl_->timer.cancel(); }

std::uint64_t HangSupervisor::collectives_completed() const { return impl_->watch->completed(); }

std::vector<std::string> HangSupervisor::stragglers() const {
  std::vector<std::string> out;
  for (const auto& [group, line] : impl_->stragglers) out.push_back(line);
  return out;
}

}  // namespace ctrun::agent
