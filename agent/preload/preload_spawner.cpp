#include "agent/preload/preload_spawner.hpp"

#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <optional>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/preload/preload_plan.hpp"
#include "agent/preload/warm_process.hpp"
#include "agent/process/guardian.hpp"
#include "common/log.hpp"
#include "common/text.hpp"

extern char** environ;

namespace ctrun::agent::preload {
namespace {

// How long an attempt waits for the imports before it starts cold: a cold worker would import as long, but an
// import that never ends (a module waiting on the network) must not hold the job.
constexpr std::chrono::seconds kReadyPatience{120};

}  // namespace

class PreloadSpawner::Impl : public std::enable_shared_from_this<Impl> {
 public:
  explicit Impl(boost::asio::io_context& io)
      : io_(io), children_(io, SIGCHLD), patience_(io), log_(ctrun::log::get("agent")) {}

  void begin(const LaunchConfig& config, const EnvLookup& env) {
    wait_for_cold_children();
    auto plan = plan_warm_process(config, config.workers.preload, env, environ);
    if (auto* why = std::get_if<std::string>(&plan)) {
      log_->warn("--preload {}: {}; every worker starts cold", text::join(config.workers.preload, ","), *why);
      return;
    }
    WarmEvents events;
    events.ready = [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->on_ready();
    };
    events.lost = [weak = weak_from_this()](const std::string& why) {
      if (auto self = weak.lock()) self->on_lost(why);
    };
    events.exited = [weak = weak_from_this()](pid_t pid, int status) {
      if (auto self = weak.lock()) self->on_warm_exit(pid, status);
    };
    try {
      warm_ = std::make_unique<WarmProcess>(io_, std::get<WarmOptions>(std::move(plan)), std::move(events));
    } catch (const PreloadError& e) {
      log_->warn("--preload {}: {}; every worker starts cold", text::join(config.workers.preload, ","), e.what());
      return;
    }
    guardian_watch(warm_->pid());  // it leads its own process group: killed with the workers if ctrun dies
    started_ = std::chrono::steady_clock::now();
    log_->info("--preload: the warm process (pid {}) imports {}", warm_->pid(),
               text::join(config.workers.preload, ","));
  }

  ~Impl() {
    if (warm_) guardian_forget(warm_->pid());
  }

  StartedWorker start(const SpawnRequest& request) {
    std::optional<std::string> why;
    if (!warm_) {
      why = "";  // said once when the spawner was made
    } else if ((why = why_cold(*warm_, request.argv, request.env)) == std::nullopt) {
      ForkRequest f;
      f.argv = request.argv;
      f.env = request.env;
      f.stdout_fd = request.stdout_fd;
      f.stderr_fd = request.stderr_fd;
      f.cpus = request.cpus;
      try {
        return StartedWorker{warm_->fork_worker(f), 0, request.argv.front()};
      } catch (const PreloadError& e) {
        why = e.what();
      }
    }
    if (!why->empty() && why != last_warning_) {
      log_->warn("--preload: starting a worker cold: {}", *why);
      last_warning_ = *why;
    }
    StartedWorker w = cold_.start(request);
    cold_pids_.insert(w.pid);
    return w;
  }

  void confirm(StartedWorker& worker) {
    // A worker forked from the warm process runs the program already (exec_errno 0): confirm has nothing to do.
    try {
      cold_.confirm(worker);
    } catch (...) {
      cold_pids_.erase(worker.pid);  // reaped by confirm
      throw;
    }
  }

  void when_ready(std::function<void()> ready) {
    if (!warm_ || warm_->state() != WarmProcess::State::kStarting) return ready();
    waiting_.push_back(std::move(ready));
    if (waiting_.size() > 1) return;
    const auto waited = std::chrono::steady_clock::now() - started_;
    patience_.expires_after(waited < kReadyPatience ? kReadyPatience - waited : std::chrono::seconds(0));
    patience_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec || !self->warm_ || self->warm_->state() != WarmProcess::State::kStarting) return;
      self->log_->warn("--preload: the warm process has been importing for {} s; this attempt starts cold",
                       kReadyPatience.count());
      self->run_waiting();
    });
  }

  bool report_exits(ExitSink sink) {
    sink_ = std::move(sink);
    return true;
  }

  std::vector<pid_t> helpers() const {
    // Until reaped here, even once lost: what it died of is read from its exit status (WarmProcess::gone).
    if (warm_ && !warm_->reaped()) return {warm_->pid()};
    return {};
  }

 private:
  void on_ready() {
    log_->info(
        "--preload: the warm process is ready ({} ms)",
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count());
    patience_.cancel();
    run_waiting();
  }

  void on_lost(const std::string& why) {
    log_->warn("--preload: the warm process (pid {}) {}; workers start cold from now on", warm_->pid(), why);
    guardian_forget(warm_->pid());
    patience_.cancel();
    run_waiting();
  }

  void on_warm_exit(pid_t pid, int status) {
    if (sink_) sink_(pid, status);
    warm_->release(pid);
  }

  void run_waiting() {
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& w : waiting) w();
  }

  // The cold workers are ctrun's children: their exits are collected here, since the group relies on reports.
  void wait_for_cold_children() {
    children_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec, int) {
      auto self = weak.lock();
      if (!self || ec) return;
      for (auto it = self->cold_pids_.begin(); it != self->cold_pids_.end();) {
        int status = 0;
        if (::waitpid(*it, &status, WNOHANG) == *it) {
          const pid_t pid = *it;
          it = self->cold_pids_.erase(it);
          if (self->sink_) self->sink_(pid, status);
        } else {
          ++it;
        }
      }
      self->wait_for_cold_children();
    });
  }

  boost::asio::io_context& io_;
  boost::asio::signal_set children_;
  boost::asio::steady_timer patience_;
  std::shared_ptr<spdlog::logger> log_;
  ForkExecSpawner cold_;
  std::unique_ptr<WarmProcess> warm_;
  std::chrono::steady_clock::time_point started_{};
  std::set<pid_t> cold_pids_;
  ExitSink sink_;
  std::vector<std::function<void()>> waiting_;
  std::string last_warning_;
};

PreloadSpawner::PreloadSpawner(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env)
    : impl_(std::make_shared<Impl>(io)) {
  impl_->begin(config, env);
}
PreloadSpawner::~PreloadSpawner() = default;

StartedWorker PreloadSpawner::start(const SpawnRequest& request) { return impl_->start(request); }
void PreloadSpawner::confirm(StartedWorker& worker) { impl_->confirm(worker); }
bool PreloadSpawner::report_exits(ExitSink sink) { return impl_->report_exits(std::move(sink)); }
void PreloadSpawner::when_ready(std::function<void()> ready) { impl_->when_ready(std::move(ready)); }
std::vector<pid_t> PreloadSpawner::helpers() const { return impl_->helpers(); }

std::unique_ptr<WorkerSpawner> make_worker_spawner(boost::asio::io_context& io, const LaunchConfig& config,
                                                   EnvLookup env) {
  if (config.workers.preload.empty()) return std::make_unique<ForkExecSpawner>();
  return std::make_unique<PreloadSpawner>(io, config, std::move(env));
}

}  // namespace ctrun::agent::preload
