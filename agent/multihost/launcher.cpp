#include "agent/multihost/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "agent/config/flag_parsers.hpp"
#include "agent/config/flags.hpp"
#include "agent/config/job_secret.hpp"
#include "agent/config/launch_config_builder.hpp"
#include "agent/logs/write_all.hpp"
#include "common/auth/secret.hpp"
#include "common/text.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::agent::multihost {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxLine = 64 * 1024;  // a longer line is passed on in pieces (bounded memory per stream)
constexpr size_t kKeptErrLines = 5;     // last stderr lines per host, for the error message
constexpr auto kDrain = std::chrono::seconds(2);

std::string default_port(const std::string& backend) {
  return std::to_string(backend == "c10d" ? rdzv::kDefaultC10dPort : rdzv::kDefaultMasterPort);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct Stream {
  int fd = -1;
  int console = 1;  // where its lines go
  std::string partial;
};

struct Remote {
  HostLaunch plan;
  pid_t pid = -1;
  int stdin_fd = -1;  // ours: closing it is the stop request
  Stream out, err;
  std::deque<std::string> last_err;
  std::optional<int> exit_code;
  bool stopped_by_us = false;  // exited after the launcher asked every host to stop
  Clock::time_point exited_at;
};

class Launcher {
 public:
  Launcher(std::vector<HostLaunch> plans, std::vector<std::string> ssh, double grace, std::string secret)
      : ssh_(std::move(ssh)), grace_(grace), secret_(std::move(secret)) {
    for (auto& p : plans) {
      Remote r;
      r.plan = std::move(p);
      remotes_.push_back(std::move(r));
    }
  }

  int run() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
    ::sigprocmask(SIG_BLOCK, &mask, &old_mask_);
    sfd_ = ::signalfd(-1, &mask, SFD_CLOEXEC);
    if (sfd_ < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
    std::signal(SIGPIPE, SIG_IGN);
    for (auto& r : remotes_) spawn(r);
    loop();
    // The worst code among hosts that ended on their own (the failure that stopped the job); hosts the launcher
    // stopped report that they were stopped, which is no news. A signalled launcher exits non-zero in any case.
    int own = 0, all = 0;
    for (const auto& r : remotes_) {
      int code = r.exit_code.value_or(1);
      all = std::max(all, code);
      if (!r.stopped_by_us) own = std::max(own, code);
    }
    if (own != 0) return own;
    return signalled_ ? std::max(all, 1) : all;
  }

 private:
  void spawn(Remote& r) {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC)) {
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    std::vector<std::string> words = ssh_;
    words.push_back(r.plan.host);
    std::string cwd = std::filesystem::current_path().string();
    words.push_back(remote_shell_command(cwd, r.plan.env, r.plan.argv));
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      std::signal(SIGPIPE, SIG_DFL);
      ::setpgid(0, 0);  // Ctrl-C reaches the launcher only; it stops the hosts in order
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() == 1) ::_exit(1);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      std::vector<char*> argv;
      for (auto& w : words) argv.push_back(w.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(255);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    r.pid = pid;
    r.stdin_fd = in[1];
    // The job's secret, the first line of the remote `--secret-file -`'s stdin (a pipe's buffer takes it at once).
    write_all(r.stdin_fd, secret_ + "\n");
    r.out = Stream{out[0], 1, {}};
    r.err = Stream{err[0], 2, {}};
  }

  void emit(Remote& r, Stream& s, const std::string& line) {
    write_all(s.console, r.plan.host + ": " + line + "\n");
    if (&s == &r.err) {
      r.last_err.push_back(line);
      if (r.last_err.size() > kKeptErrLines) r.last_err.pop_front();
    }
  }

  // Returns false at EOF.
  bool pump(Remote& r, Stream& s) {
    char buf[65536];
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      if (!s.partial.empty()) emit(r, s, s.partial);
      s.partial.clear();
      ::close(s.fd);
      s.fd = -1;
      return false;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    while (true) {
      size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      emit(r, s, s.partial.substr(start, nl - start));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (s.partial.size() > kMaxLine) {
      emit(r, s, s.partial);
      s.partial.clear();
    }
    return true;
  }

  void say(const std::string& text) { write_all(2, "ctrun: " + text + "\n"); }

  // Asks every host to stop: EOF on the remote wrapper's stdin. ssh itself is terminated after the grace.
  void stop_all(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    say(why);
    for (auto& r : remotes_) {
      if (r.stdin_fd >= 0) {
        ::close(r.stdin_fd);
        r.stdin_fd = -1;
      }
    }
    term_at_ = Clock::now() + std::chrono::milliseconds(static_cast<long long>(grace_ * 1000));
  }

  void signal_ssh(int sig) {
    for (auto& r : remotes_) {
      if (!r.exit_code && r.pid > 0) ::kill(r.pid, sig);
    }
  }

  void on_exit(Remote& r, int status) {
    r.exit_code = exit_code_of(status);
    r.stopped_by_us = stopping_;
    r.exited_at = Clock::now();
    if (r.stdin_fd >= 0) {
      ::close(r.stdin_fd);
      r.stdin_fd = -1;
    }
    int code = *r.exit_code;
    if (code == 0 || stopping_) return;
    std::string detail = r.last_err.empty() ? "" : ": " + r.last_err.back();
    if (code == 255) {
      std::string ssh_text;
      for (const auto& w : ssh_) ssh_text += (ssh_text.empty() ? "" : " ") + w;
      stop_all("cannot reach host " + r.plan.host + " (`" + ssh_text + " " + r.plan.host + "` exited 255" + detail +
               "); stopping the other hosts");
    } else {
      stop_all("host " + r.plan.host + " failed with exit code " + std::to_string(code) + "; stopping the other hosts");
    }
  }

  bool done() const {
    for (const auto& r : remotes_) {
      if (!r.exit_code) return false;
      if ((r.out.fd >= 0 || r.err.fd >= 0) && Clock::now() - r.exited_at < kDrain) return false;
    }
    return true;
  }

  void loop() {
    while (!done()) {
      std::vector<pollfd> fds = {{sfd_, POLLIN, 0}};
      std::vector<std::pair<Remote*, Stream*>> owners = {{nullptr, nullptr}};
      for (auto& r : remotes_) {
        for (Stream* s : {&r.out, &r.err}) {
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            owners.emplace_back(&r, s);
          }
        }
      }
      int timeout_ms = 500;  // re-checks the drain and stop deadlines
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i].first, *owners[i].second);
      }
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo info{};
        if (::read(sfd_, &info, sizeof info) == sizeof info) on_signal(static_cast<int>(info.ssi_signo));
      }
      reap();
      auto now = Clock::now();
      if (term_at_ && now >= *term_at_) {
        signal_ssh(SIGTERM);
        term_at_.reset();
        kill_at_ = now + std::chrono::seconds(3);
      }
      if (kill_at_ && now >= *kill_at_) {
        signal_ssh(SIGKILL);
        kill_at_.reset();
      }
      for (auto& r : remotes_) {  // a stream still open long after its ssh exited: something else holds it
        if (r.exit_code && now - r.exited_at >= kDrain) {
          for (Stream* s : {&r.out, &r.err}) {
            if (s->fd >= 0) {
              ::close(s->fd);
              s->fd = -1;
            }
          }
        }
      }
    }
  }

  void reap() {
    while (true) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (auto& r : remotes_) {
        if (r.pid == pid) on_exit(r, status);
      }
    }
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return;  // reap() follows
    signalled_ = true;
    if (stopping_ && sig != SIGHUP) {
      say("second signal: killing every ssh now");
      signal_ssh(SIGKILL);
      return;
    }
    stop_all(std::string("got ") + ::sigabbrev_np(sig) + "; stopping every host (again to kill at once)");
  }

  std::vector<Remote> remotes_;
  std::vector<std::string> ssh_;
  double grace_;
  std::string secret_;
  sigset_t old_mask_{};
  int sfd_ = -1;
  bool stopping_ = false;
  bool signalled_ = false;
  std::optional<Clock::time_point> term_at_, kill_at_;
};

bool given(const CommandLine& cli, const std::string& dest) { return cli.values.count(dest) != 0; }

}  // namespace

std::vector<HostLaunch> plan_launch(const CommandLine& cli, const std::vector<Host>& hosts,
                                    const std::string& ctrun_path, const std::string& run_id, const EnvVars& exported) {
  const auto chosen = given(cli, "rdzv_backend") ? rdzv::parse_backend(cli.values.at("rdzv_backend"))
                                                 : std::optional<rdzv::Backend>(rdzv::Backend::kC10d);
  if (chosen != rdzv::Backend::kC10d && chosen != rdzv::Backend::kStatic) {
    throw UsageError("--hostfile/--hosts: --rdzv-backend " + cli.values.at("rdzv_backend") +
                     " is not supported (c10d or static)");
  }
  const std::string backend(rdzv::backend_name(*chosen));
  const std::string first = hosts.front().name;
  std::vector<std::string> common = {"--rdzv-backend", backend};
  if (!given(cli, "nnodes")) common.insert(common.end(), {"--nnodes", std::to_string(hosts.size())});
  if (!given(cli, "rdzv_id")) common.insert(common.end(), {"--rdzv-id", run_id});
  if (backend == "c10d") {
    if (!given(cli, "rdzv_endpoint"))
      common.insert(common.end(), {"--rdzv-endpoint", first + ":" + default_port(backend)});
  } else {
    if (!given(cli, "master_addr") && !given(cli, "rdzv_endpoint")) {
      common.insert(common.end(), {"--master-addr", first});
    }
    if (!given(cli, "master_port") && !given(cli, "rdzv_endpoint")) {
      common.insert(common.end(), {"--master-port", default_port(backend)});
    }
  }
  // The user's own flags, as given on the command line (the rest comes from --config, forwarded, or the host).
  std::vector<std::string> forwarded;
  for (const auto& [dest, value] : cli.values) {
    const FlagSpec* f = find_flag(dest);
    if (f == nullptr || f->origin == FlagOrigin::kLauncher || dest == "rdzv_backend") continue;
    if (f->kind == FlagKind::kBool) {
      if (parse_flag_bool(value)) forwarded.push_back(dashed_name(dest));
    } else {
      forwarded.push_back(dashed_name(dest) + "=" + value);
    }
  }
  std::vector<HostLaunch> out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const Host& h = hosts[i];
    HostLaunch l;
    l.host = h.name;
    l.env = exported;
    l.env.emplace_back(kLaunchedMarker, "1");
    l.argv = {ctrun_path, "--exit-on-stdin-close", "--secret-file", "-"};
    l.argv.insert(l.argv.end(), common.begin(), common.end());
    if (backend == "static" && !given(cli, "node_rank")) {
      l.argv.insert(l.argv.end(), {"--node-rank", std::to_string(i)});
    }
    if (!given(cli, "local_addr")) l.argv.insert(l.argv.end(), {"--local-addr", h.name});
    if (!given(cli, "nproc_per_node")) {
      if (h.slots_filtered) {
        l.nproc = static_cast<int>(h.slot_ids.size());
      } else if (h.slots) {
        l.nproc = *h.slots;
      }
      if (l.nproc > 0) l.argv.insert(l.argv.end(), {"--nproc-per-node", std::to_string(l.nproc)});
    }
    if (h.slots_filtered) {
      l.env.emplace_back("CUDA_VISIBLE_DEVICES",
                         text::join_with(h.slot_ids, ",", [](int s) { return std::to_string(s); }));
    }
    l.argv.insert(l.argv.end(), forwarded.begin(), forwarded.end());
    l.argv.push_back("--");
    l.argv.push_back(cli.script);
    l.argv.insert(l.argv.end(), cli.script_args.begin(), cli.script_args.end());
    out.push_back(std::move(l));
  }
  return out;
}

int run_multihost(LaunchConfig& config, const CommandLine& cli, const EnvLookup& env) {
  const auto secret = launcher_secret(config, env);  // the user's, or one made for this job
  std::vector<Host> hosts;
  EnvVars exported;
  try {
    hosts = config.multihost.hostfile ? read_hostfile(*config.multihost.hostfile)
                                      : parse_host_list(*config.multihost.hosts);
    hosts = filter_hosts(std::move(hosts), config.multihost.include, config.multihost.exclude);
    exported = exported_environment(config.multihost.exports, env, env("HOME").value_or(""),
                                    std::filesystem::current_path().string());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) self = "ctrun";
  auto plans = plan_launch(cli, hosts, self, random_run_id(), exported);
  std::vector<std::string> ssh = text::split_words(config.multihost.ssh);
  const std::string summary = text::join_with(plans, ", ", [](const HostLaunch& p) {
    return p.host + (p.nproc > 0 ? " (" + std::to_string(p.nproc) + ")" : "");
  });
  std::string rdzv;
  for (size_t i = 0; i + 1 < plans.front().argv.size(); ++i) {
    const auto& a = plans.front().argv[i];
    if (a == "--rdzv-endpoint" || a == "--master-addr" || a == "--rdzv-id")
      rdzv += " " + a + " " + plans.front().argv[i + 1];
  }
  write_all(2, "ctrun: starting " + std::to_string(plans.size()) + " hosts over " + ssh.front() + ": " + summary + ";" +
                   rdzv + "\n");
  // Enough for every agent to stop its workers (--shutdown-timeout) and for ssh to return.
  Launcher launcher(std::move(plans), std::move(ssh), config.shutdown.timeout + 10.0, secret->key());
  return launcher.run();
}

}  // namespace ctrun::agent::multihost
