#include "agent/preload/warm_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/base/signal_names.hpp"
#include "agent/process/worker_process.hpp"

#ifndef CTRUN_INSTALL_PYTHONDIR
#define CTRUN_INSTALL_PYTHONDIR "lib/python3/dist-packages"
#endif

namespace ctrun::agent::preload {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxReply = 64 * 1024;          // a refusal's message is the longest reply
constexpr int kRequestBufferBytes = 4 * 1024 * 1024;  // SO_SNDBUF asked for: a fork request is one datagram
// A warm process whose socket closed becomes a zombie within this (WarmProcess::Impl::gone), polled this often.
constexpr std::chrono::milliseconds kExitPatience{2000};
constexpr std::chrono::milliseconds kExitPoll{5};

std::vector<std::string> split_fields(const char* data, std::size_t size) {
  std::vector<std::string> out;
  std::string_view rest(data, size);
  while (true) {
    auto nul = rest.find('\0');
    out.emplace_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) return out;
    rest.remove_prefix(nul + 1);
  }
}

std::string join_fields(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out.push_back('\0');
    out += fields[i];
  }
  return out;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "killed by " + signal_name(WTERMSIG(status));
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  return "status " + std::to_string(status);
}

}  // namespace

std::string warm_program_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path prefix = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  if (ec) throw PreloadError(std::string("cannot read /proc/self/exe: ") + ec.message());
  // A build tree; `cmake --install` and the Debian package; `pip install .` (beside the stack dumps' sitecustomize).
  const fs::path dirs[] = {prefix / "python", prefix / CTRUN_INSTALL_PYTHONDIR, prefix / "share" / "ctrun" / "python"};
  for (const fs::path& dir : dirs) {
    if (fs::exists(dir / "ctrun_warm.py", ec)) return (dir / "ctrun_warm.py").string();
  }
  throw PreloadError("ctrun_warm.py is in none of " + dirs[0].string() + ", " + dirs[1].string() + ", " +
                     dirs[2].string() + ": reinstall ctrun");
}

class WarmProcess::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(boost::asio::io_context& io, WarmOptions options, WarmEvents events)
      : io_(io), socket_(io), reap_timer_(io), options_(std::move(options)), events_(std::move(events)) {}

  void start() {
    if (options_.worker_argv.empty()) throw PreloadError("no worker command to preload for");
    const std::string program = options_.program.empty() ? warm_program_path() : options_.program;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
      throw PreloadError(std::string("socketpair: ") + std::strerror(errno));
    // Fork requests carry the whole environment in one datagram: room for it (the kernel caps this at wmem_max).
    ::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &kRequestBufferBytes, sizeof kRequestBufferBytes);
    // The warm process's end, its descriptor 3 (the only one it gets besides stdio); it blocks on it.
    const int theirs = sv[1];
    ::fcntl(theirs, F_SETFL, ::fcntl(theirs, F_GETFL) & ~O_NONBLOCK);
    SpawnRequest req;
    req.argv = {options_.worker_argv.at(0), "-u", program, "--fd", "3"};
    req.channel_fd = theirs;
    req.own_session = own_session_for_workers();  // its forked workers follow it (ctrun_warm.py, fork())
    if (!options_.modules.empty()) {
      std::string joined;
      for (const auto& m : options_.modules) {
        if (!joined.empty()) joined += ',';
        joined += m;
      }
      req.argv.insert(req.argv.end(), {"--preload", joined});
    }
    req.argv.push_back("--");
    req.argv.insert(req.argv.end(), options_.worker_argv.begin(), options_.worker_argv.end());
    req.env = options_.env;
    req.stdout_fd = STDERR_FILENO;  // what it prints while importing is ctrun's diagnostics, not a worker's output
    try {
      pid_ = spawn_worker(req);
    } catch (const SpawnError& e) {
      ::close(sv[0]);
      ::close(theirs);
      throw PreloadError(std::string("cannot start the warm process: ") + e.what());
    }
    ::close(theirs);
    socket_.assign(sv[0]);
    read_replies();
  }

  ~Impl() { stop(); }

  void stop() {
    if (socket_.is_open()) {
      boost::system::error_code ignored;
      socket_.close(ignored);
    }
    reap_timer_.cancel();
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);  // it may be busy importing; its workers die with it (PR_SET_PDEATHSIG)
      for (int i = 0; i < 100 && ::waitpid(pid_, nullptr, WNOHANG) == 0; ++i) ::usleep(1000);
      reaped_ = true;
    }
  }

  pid_t fork_worker(const ForkRequest& request, std::chrono::milliseconds timeout) {
    if (state_ != State::kReady)
      throw PreloadError(state_ == State::kLost ? "the warm process " + lost_reason_
                                                : "the warm process is still importing");
    const auto deadline = Clock::now() + timeout;
    const std::string id = std::to_string(++request_seq_);
    std::string cwd = request.cwd;
    if (cwd.empty()) {
      std::error_code ec;
      cwd = std::filesystem::current_path(ec).string();
    }
    std::string cpus;
    for (int c : request.cpus) {
      if (!cpus.empty()) cpus += ',';
      cpus += std::to_string(c);
    }
    std::vector<std::string> fields = {"fork", id, cwd, cpus, std::to_string(request.argv.size())};
    fields.insert(fields.end(), request.argv.begin(), request.argv.end());
    fields.insert(fields.end(), request.env.begin(), request.env.end());
    const std::string message = join_fields(fields);
    std::array<int, 3> fds = {request.stdin_fd >= 0 ? request.stdin_fd : STDIN_FILENO,
                              request.stdout_fd >= 0 ? request.stdout_fd : STDOUT_FILENO,
                              request.stderr_fd >= 0 ? request.stderr_fd : STDERR_FILENO};
    // A descriptor of ctrun's own that is closed cannot be passed: the worker gets /dev/null there instead.
    int null_fd = -1;
    for (int& fd : fds) {
      if (::fcntl(fd, F_GETFD) >= 0) continue;
      if (null_fd < 0) null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      fd = null_fd;
    }
    try {
      send_with_fds(message, fds, deadline);
    } catch (...) {
      if (null_fd >= 0) ::close(null_fd);
      throw;
    }
    if (null_fd >= 0) ::close(null_fd);
    while (true) {
      if (auto answer = take_answer(id)) {
        if (answer->first > 0) return answer->first;
        throw PreloadError("the warm process could not fork the worker: " + answer->second);
      }
      if (state_ == State::kLost) throw PreloadError("the warm process " + lost_reason_);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{socket_.native_handle(), POLLIN, 0};
      int n = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        lose("did not answer a fork request within " + std::to_string(timeout.count()) + " ms");
        throw PreloadError("the warm process " + lost_reason_);
      }
      drain();
    }
  }

  void release(pid_t worker) {
    if (state_ == State::kLost || !socket_.is_open()) return;
    const std::string message = "reap" + std::string(1, '\0') + std::to_string(worker);
    // A few bytes into a socket buffer sized for fork requests; if it were full the zombie stays until the warm
    // process exits, which costs a process table entry and nothing else.
    (void)::send(socket_.native_handle(), message.data(), message.size(), MSG_NOSIGNAL);
  }

  State state_ = State::kStarting;
  std::string lost_reason_;
  pid_t pid_ = -1;

  const WarmOptions& options() const { return options_; }
  bool reaped() const { return reaped_; }

 private:
  void send_with_fds(const std::string& message, const std::array<int, 3>& fds, Clock::time_point deadline) {
    iovec iov{const_cast<char*>(message.data()), message.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 3);
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * 3);
    while (true) {
      if (::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL) >= 0) return;
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd p{socket_.native_handle(), POLLOUT, 0};
        if (left > 0 && ::poll(&p, 1, static_cast<int>(left)) >= 0) continue;
        lose("did not take a fork request in time");
        throw PreloadError("the warm process " + lost_reason_);
      }
      if (err == EMSGSIZE)
        throw PreloadError("the worker's command and environment (" + std::to_string(message.size()) +
                           " bytes) do not fit in one message to the warm process (net.core.wmem_max)");
      // Its end is closed (EPIPE, ECONNRESET): it is exiting; what it died of is said once known.
      gone(std::string("could not be sent a request: ") + std::strerror(err));
      throw PreloadError("the warm process " + lost_reason_);
    }
  }

  // The answer to fork request `id` if it has come: {pid, ""} or {-1, why}.
  std::optional<std::pair<pid_t, std::string>> take_answer(const std::string& id) {
    auto it = answers_.find(id);
    if (it == answers_.end()) return std::nullopt;
    auto answer = it->second;
    answers_.erase(it);
    return answer;
  }

  void read_replies() {
    socket_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       [weak = weak_from_this()](const boost::system::error_code& ec) {
                         auto self = weak.lock();
                         if (!self || ec || !self->socket_.is_open()) return;
                         self->drain();
                         if (self->socket_.is_open()) self->read_replies();
                       });
  }

  // Reads every message that has arrived (the socket does not block).
  void drain() {
    while (socket_.is_open()) {
      char buffer[kMaxReply];
      ssize_t n = ::recv(socket_.native_handle(), buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return on_closed();
      on_message(split_fields(buffer, static_cast<std::size_t>(n)));
    }
  }

  void on_message(const std::vector<std::string>& f) {
    const std::string& verb = f[0];
    try {
      if (verb == "ready" && state_ == State::kStarting) {
        state_ = State::kReady;
        return notify([](Impl& self) {
          if (self.events_.ready) self.events_.ready();
        });
      }
      if (verb == "refused") return lose("refused: " + (f.size() > 1 ? f[1] : std::string("(no reason)")));
      if (verb == "started" && f.size() >= 3) {
        const pid_t pid = static_cast<pid_t>(std::stol(f[2]));
        workers_.insert(pid);
        answers_[f[1]] = {pid, ""};
        return;
      }
      if (verb == "failed" && f.size() >= 3) {
        answers_[f[1]] = {-1, f[2]};
        return;
      }
      if (verb == "exited" && f.size() >= 3) {
        const pid_t pid = static_cast<pid_t>(std::stol(f[1]));
        const int status = std::stoi(f[2]);
        if (workers_.erase(pid) == 0) return;
        return notify([pid, status](Impl& self) {
          if (self.events_.exited) self.events_.exited(pid, status);
        });
      }
    } catch (const std::exception&) {  // std::stol on a garbled number
    }
    lose("sent a message ctrun does not understand ('" + verb + "')");
  }

  void on_closed() { gone("closed its socket"); }

  // Its end of the socket closed: it is exiting, or gone. Forks go cold at once; the loss is announced (what it
  // died of, its orphaned workers' exits) once its exit status is known: the zombie appears a moment after its
  // descriptors close, which under load can take well over 50 ms. Not reaped within kExitPatience: killed, and
  // `otherwise` is the reason. Never blocks the loop.
  void gone(const std::string& otherwise) {
    if (state_ == State::kLost) return;
    mark_lost(otherwise);
    await_exit(otherwise, static_cast<int>(kExitPatience / kExitPoll));
  }

  void await_exit(const std::string& otherwise, int tries) {
    reap_timer_.expires_after(tries == static_cast<int>(kExitPatience / kExitPoll) ? std::chrono::milliseconds(0)
                                                                                   : kExitPoll);
    reap_timer_.async_wait([weak = weak_from_this(), otherwise, tries](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec || self->announced_) return;
      int status = 0;
      const pid_t r = self->pid_ > 0 && !self->reaped_ ? ::waitpid(self->pid_, &status, WNOHANG) : -1;
      if (r == self->pid_) {
        self->reaped_ = true;
        return self->announce("died (" + describe_status(status) + ")");
      }
      if (r < 0) return self->announce(otherwise);  // reaped elsewhere: its status is not ours to know
      if (tries > 0) return self->await_exit(otherwise, tries - 1);
      ::kill(self->pid_, SIGKILL);
      self->announce(otherwise);
      self->reap_later(100);
    });
  }

  // From now on every fork is cold. Workers it had forked die with it (PR_SET_PDEATHSIG): each is reported as
  // killed, since its real status went to the warm process.
  void lose(const std::string& why) {
    if (state_ == State::kLost) return;
    mark_lost(why);
    if (pid_ > 0 && !reaped_) ::kill(pid_, SIGKILL);
    announce(why);
    if (pid_ > 0 && !reaped_) reap_later(100);
  }

  void mark_lost(const std::string& why) {
    state_ = State::kLost;
    lost_reason_ = why;
    if (socket_.is_open()) {
      boost::system::error_code ignored;
      socket_.close(ignored);
    }
  }

  void announce(const std::string& why) {
    if (announced_) return;
    announced_ = true;
    lost_reason_ = why;
    std::set<pid_t> orphans;
    orphans.swap(workers_);
    notify([why, orphans](Impl& self) {
      if (self.events_.lost) self.events_.lost(why);
      for (pid_t pid : orphans) {
        if (self.events_.exited) self.events_.exited(pid, SIGKILL);
      }
    });
  }

  void reap_later(int tries) {
    reap_timer_.expires_after(std::chrono::milliseconds(10));
    reap_timer_.async_wait([weak = weak_from_this(), tries](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (!self || ec || self->reaped_) return;
      pid_t r = ::waitpid(self->pid_, nullptr, WNOHANG);
      if (r == self->pid_ || r < 0) {
        self->reaped_ = true;
        return;
      }
      if (tries > 0) self->reap_later(tries - 1);
    });
  }

  // Events run on the loop, never inside a call of the owner (which may be in the middle of a spawn).
  template <class F>
  void notify(F f) {
    boost::asio::post(io_, [weak = weak_from_this(), f = std::move(f)]() {
      if (auto self = weak.lock()) f(*self);
    });
  }

  boost::asio::io_context& io_;
  boost::asio::posix::stream_descriptor socket_;
  boost::asio::steady_timer reap_timer_;
  WarmOptions options_;
  WarmEvents events_;
  std::uint64_t request_seq_ = 0;
  std::map<std::string, std::pair<pid_t, std::string>> answers_;
  std::set<pid_t> workers_;  // forked and not yet reported as exited
  bool reaped_ = false;
  bool announced_ = false;  // events_.lost sent
};

WarmProcess::WarmProcess(boost::asio::io_context& io, WarmOptions options, WarmEvents events)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(events))) {
  impl_->start();
}

WarmProcess::~WarmProcess() { impl_->stop(); }

WarmProcess::State WarmProcess::state() const { return impl_->state_; }
const std::string& WarmProcess::lost_reason() const { return impl_->lost_reason_; }
bool WarmProcess::reaped() const { return impl_->reaped(); }
pid_t WarmProcess::pid() const { return impl_->pid_; }
const std::vector<std::string>& WarmProcess::env() const { return impl_->options().env; }
const std::string& WarmProcess::interpreter() const { return impl_->options().worker_argv.front(); }

pid_t WarmProcess::fork_worker(const ForkRequest& request, std::chrono::milliseconds timeout) {
  return impl_->fork_worker(request, timeout);
}

void WarmProcess::release(pid_t worker) { impl_->release(worker); }

}  // namespace ctrun::agent::preload
