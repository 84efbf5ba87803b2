#include "agent/checkpoint/spill.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/checkpoint/job_directory.hpp"
#include "agent/process/escapees.hpp"
#include "common/log.hpp"

extern char** environ;

namespace ctrun::agent::checkpoint {
namespace fs = std::filesystem;

std::string check_spill_dir(const std::string& dir) {
  if (dir.empty()) return "must name a directory";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot make the directory " + dir + ": " + ec.message();
  if (!fs::is_directory(dir, ec)) return dir + " is not a directory";
  // A probe file, not access(2): root passes access() on a read-only file system.
  const fs::path probe = fs::path(dir) / (".ctrun-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write in " + dir + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

bool spill_due(const SpillSettings& settings, std::int64_t step, std::optional<std::int64_t> last_started_step,
               double seconds_since_last_start) {
  if (!last_started_step) return true;
  if (step <= *last_started_step) return false;  // copied (or being copied) already
  if (settings.every_seconds > 0) return seconds_since_last_start >= settings.every_seconds;
  return step >= *last_started_step + settings.every;
}

struct Spiller::Impl : std::enable_shared_from_this<Impl> {
  Impl(boost::asio::io_context& io, SpillSettings s, JobDirectory& d, EventLog& ev)
      : settings(std::move(s)), dir(d), events(ev), timer(io), log(ctrun::log::get("checkpoint")) {}

  ~Impl() {
    if (pid <= 0) return;
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == 0) {
      // The job ends: a copy still running is abandoned (the next spill removes its folder), with whatever a
      // wrapper started in its process group. SIGTERM first, so that a wrapper can undo what it set up (a chroot's
      // mounts), then SIGKILL after at most a second.
      ::kill(-pid, SIGTERM);
      for (int i = 0; i < 100 && (r = ::waitpid(pid, &status, WNOHANG)) == 0; ++i) ::usleep(10'000);
      if (r == 0) {
        ::kill(-pid, SIGKILL);
        r = ::waitpid(pid, &status, 0);
      }
    }
    pid = -1;
    report(r > 0 ? status : -1);
    remove_pinned();
  }

  void begin_attempt(const std::vector<int>& r, int world) {
    ranks = r;
    world_size = world;
    latest.clear();
  }

  void committed(int rank, std::int64_t step) {
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) return;
    auto [it, fresh] = latest.try_emplace(rank, step);
    if (!fresh) it->second = std::max(it->second, step);
    try_start();
  }

  // The newest step every local rank committed in this attempt, when it is due.
  std::optional<std::int64_t> due_step() const {
    if (ranks.empty() || latest.size() != ranks.size()) return std::nullopt;
    std::int64_t step = latest.begin()->second;
    for (const auto& [rank, s] : latest) step = std::min(step, s);
    const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!spill_due(settings, step, last_started, since)) return std::nullopt;
    return step;
  }

  void try_start() {
    if (pid > 0) return;  // one at a time; the poll tries again when it ends
    const auto step = due_step();
    if (!step) return;
    std::string pinned;
    switch (dir.pin_step(*step, ranks, pinned)) {
      case JobDirectory::Pin::kBusy:  // a worker holds the lock for a moment: never wait for it on the loop
        arm(std::chrono::milliseconds(20));
        return;
      case JobDirectory::Pin::kMissing:  // a rank moved past it already; the next commit brings a newer one
        return;
      case JobDirectory::Pin::kPinned:
        break;
    }
    pinned_dir = pinned;
    if (!spawn(*step)) {
      remove_pinned();
      return;
    }
    last_started = *step;
    running_step = *step;
    started = std::chrono::steady_clock::now();
    arm(std::chrono::milliseconds(100));
  }

  bool spawn(std::int64_t step) {
    std::vector<std::string> args = settings.python;
    for (const std::string& a :
         {std::string("-m"), std::string("ctrun_torch.checkpoint.spill"), std::string("--pinned"), pinned_dir,
          std::string("--out"), settings.out_dir, std::string("--step"), std::to_string(step), std::string("--world"),
          std::to_string(world_size)})
      args.push_back(a);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      // Without the job's mark: the sweep of a group's leftover processes spares the spill process by its pid, but
      // not what a wrapper (a chroot's python script) starts under it. It is ended by its process group instead.
      if (!settings.env.contains(name) && name != kJobTokenVariable) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : settings.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t child = ::fork();
    if (child < 0) {
      log->warn("--checkpoint-dir: cannot start the spill process of step {}: {}", step, std::strerror(errno));
      return false;
    }
    if (child == 0) {
      // Only async-signal-safe calls until exec. Its own process group: a ^C at the terminal goes to ctrun, which
      // ends it; the lowest CPU priority and the idle I/O class: the workers come first.
      ::setpgid(0, 0);
      ::setpriority(PRIO_PROCESS, 0, 19);
      constexpr int kIoprioClassIdle = 3, kIoprioClassShift = 13, kIoprioWhoProcess = 1;
      ::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, kIoprioClassIdle << kIoprioClassShift);
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) ::dup2(null, STDIN_FILENO), ::dup2(null, STDOUT_FILENO);
      ::execvpe(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    pid = child;
    log->debug("--checkpoint-dir: spill process {} copies step {} to {}", pid, step, settings.out_dir);
    return true;
  }

  void arm(std::chrono::milliseconds after) {
    timer.expires_after(after);
    timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->poll();
    });
  }

  void poll() {
    if (pid <= 0) {
      try_start();
      return;
    }
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == 0) {
      arm(std::chrono::milliseconds(100));
      return;
    }
    if (r != pid) status = -1;
    pid = -1;
    report(status);
    remove_pinned();
    try_start();
  }

  // The spill process of running_step ended with `status` (-1: it could not be reaped).
  void report(int status) {
    const bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    nlohmann::json fields = {{"step", running_step}, {"dir", settings.out_dir}, {"seconds", seconds}, {"ok", ok}};
    if (!ok) {
      fields["exit"] = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      log->warn(
          "--checkpoint-dir: the spill process of step {} failed ({}); nothing held in memory is lost, the "
          "next due step is tried",
          running_step,
          WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                              : "exit " + std::to_string(fields["exit"].get<int>()));
    }
    if (ok) spilled = std::max(spilled, running_step);
    events.emit(Event::kCheckpointSpilled, fields);
  }

  void remove_pinned() {
    std::error_code ec;
    if (!pinned_dir.empty()) fs::remove_all(pinned_dir, ec);
    pinned_dir.clear();
  }

  SpillSettings settings;
  JobDirectory& dir;
  EventLog& events;
  boost::asio::steady_timer timer;
  std::shared_ptr<spdlog::logger> log;
  std::vector<int> ranks;
  int world_size = 0;
  std::map<int, std::int64_t> latest;  // local rank -> newest step it committed in this attempt
  std::optional<std::int64_t> last_started;
  pid_t pid = -1;
  std::int64_t running_step = 0;
  std::int64_t spilled = -1;  // the newest step a spill process finished
  std::string pinned_dir;
  std::chrono::steady_clock::time_point started;
};

Spiller::Spiller(boost::asio::io_context& io, SpillSettings settings, JobDirectory& dir, EventLog& events)
    : impl_(std::make_shared<Impl>(io, std::move(settings), dir, events)) {}

Spiller::~Spiller() = default;

void Spiller::begin_attempt(const std::vector<int>& ranks, int world_size) { impl_->begin_attempt(ranks, world_size); }
void Spiller::committed(int rank, std::int64_t step) { impl_->committed(rank, step); }
std::int64_t Spiller::spilled_step() const { return impl_->spilled; }

std::vector<pid_t> Spiller::helpers() const {
  return impl_->pid > 0 ? std::vector<pid_t>{impl_->pid} : std::vector<pid_t>{};
}

}  // namespace ctrun::agent::checkpoint
