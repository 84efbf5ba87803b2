#include "agent/checkpoint/replica_transfer.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "agent/checkpoint/job_directory.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/base/memory_size.hpp"
#include "agent/checkpoint/replica_wire.hpp"
#include "agent/checkpoint/snapshot_digest.hpp"
#include "common/auth/handshake.hpp"
#include "common/log.hpp"

namespace ctrun::agent::checkpoint {
namespace fs = std::filesystem;
namespace {

std::uint64_t allocated(const fs::path& file) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// A file received from a peer, made visible only by commit(): a failure before leaves nothing.
class Incoming {
 public:
  // Under the directory's lock: the limit checked against everything held plus `size`, then the space taken.
  Incoming(const std::string& job_dir, const std::string& subdir, std::int64_t step, std::uint64_t size,
           std::uint64_t limit)
      : dir_(fs::path(job_dir) / subdir) {
    DirLock lock(job_dir);
    const std::uint64_t used = used_bytes_of(job_dir);
    // A replica reuses the pages of the one that fell out of the newest kKeptSteps (its spare, as a rank's save
    // does): receiving into fresh tmpfs pages costs as much again as the copy. The spare is in `used` already.
    const fs::path spare = dir_ / kSpareFile;
    std::error_code spare_ec;
    const std::uint64_t reusable = fs::exists(spare, spare_ec) ? allocated(spare) : 0;
    if (used + (size > reusable ? size - reusable : 0) > limit)
      throw std::runtime_error("a snapshot of " + format_bytes(size) + " would pass this node's --checkpoint-memory (" +
                               format_bytes(limit) + "; " + format_bytes(used) + " held)");
    std::error_code ec;
    fs::create_directories(dir_, ec);
    partial_ = dir_ / (std::string(kPartialPrefix) + std::to_string(step) + "-" + std::to_string(::getpid()) + "-" +
                       std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    final_ = dir_ / step_file_name(step);
    if (reusable > 0 && ::rename(spare.c_str(), partial_.c_str()) == 0) {
      fd_ = ::open(partial_.c_str(), O_RDWR | O_CLOEXEC);
      if (fd_ >= 0 && ::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
        ::close(fd_);
        fd_ = -1;
      }
    } else {
      fd_ = ::open(partial_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd_ < 0) throw std::runtime_error(sys_error("cannot create " + partial_.string()));
    // All of it now: a full tmpfs is a refusal before any byte is received, never a failure halfway.
    if (int rc = size > 0 ? ::posix_fallocate(fd_, 0, static_cast<off_t>(size)) : 0; rc != 0) {
      discard();
      throw std::runtime_error("cannot allocate " + format_bytes(size) + " in " + job_dir + ": " + std::strerror(rc));
    }
  }
  ~Incoming() { discard(); }
  Incoming(const Incoming&) = delete;
  Incoming& operator=(const Incoming&) = delete;

  int fd() const { return fd_; }
  // The partial file (complete once the body is received), for the digest check before commit().
  const fs::path& path() const { return partial_; }

  // The rename that makes it visible; for replicas, steps above it (an abandoned timeline) and all but the newest
  // kKeptSteps go.
  void commit(const std::string& job_dir, bool prune) {
    close_file();
    DirLock lock(job_dir);
    if (prune) {
      std::error_code ec;
      for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        auto s = step_of(it->path().filename().string());
        if (s && *s > step_of(final_.filename().string()).value_or(0)) ::unlink(it->path().c_str());
      }
    }
    if (::rename(partial_.c_str(), final_.c_str()) != 0)
      throw std::runtime_error(sys_error("rename " + final_.string()));
    committed_ = true;
    if (prune) {
      std::vector<std::int64_t> steps;
      std::error_code ec;
      for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        if (auto s = step_of(it->path().filename().string())) steps.push_back(*s);
      }
      std::sort(steps.begin(), steps.end());
      for (std::size_t i = 0; i + kKeptSteps < steps.size(); ++i) {
        const fs::path old = dir_ / step_file_name(steps[i]);
        std::error_code ec;
        if (fs::exists(dir_ / kSpareFile, ec) || ::rename(old.c_str(), (dir_ / kSpareFile).c_str()) != 0)
          ::unlink(old.c_str());
      }
    }
  }

 private:
  void close_file() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void discard() {
    close_file();
    if (!committed_ && !partial_.empty()) ::unlink(partial_.c_str());
  }
  fs::path dir_, partial_, final_;
  int fd_ = -1;
  bool committed_ = false;
};

void receive_body(Connection& conn, Incoming& in, std::uint64_t size) { conn.receive_file(in.fd(), 0, size); }

// A connection to a peer's endpoint, the job's handshake done when there is a secret.
Connection open_to(const std::string& endpoint, const std::atomic<bool>& stop, std::chrono::milliseconds idle,
                   const auth::Secret* secret) {
  Connection conn = Connection::connect(endpoint, stop, idle);
  if (secret)
    auth::prove_to_server(conn.fd(), *secret, auth::Purpose::kReplica, std::chrono::steady_clock::now() + idle,
                          "the replication endpoint " + endpoint, &stop);
  return conn;
}

std::string address_of(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a.sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof host);
    std::string out(1, '[');  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::string
    out.append(host).append("]:").append(std::to_string(ntohs(a.sin6_port)));
    return out;
  }
  return "?";
}

// The open snapshot file of `rank` at `step` this node holds (its own, else a replica), or -1.
int open_held(const std::string& job_dir, int rank, std::int64_t step) {
  for (const auto& sub : {rank_dir_name(rank), replica_dir_name(rank)}) {
    const int fd = ::open((fs::path(job_dir) / sub / step_file_name(step)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return fd;
  }
  return -1;
}

}  // namespace

ReplicaServer::ReplicaServer(std::string job_dir, std::uint64_t limit, const std::string& host,
                             std::chrono::milliseconds idle, std::shared_ptr<const auth::Secret> secret)
    : dir_(std::move(job_dir)), limit_(limit), idle_(idle), secret_(std::move(secret)) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0)
    throw std::runtime_error("cannot resolve " + host + " for the replication endpoint: " + ::gai_strerror(rc));
  listen_fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  size_socket_buffers(listen_fd_);  // accepted connections inherit them
  const bool bound =
      listen_fd_ >= 0 && ::bind(listen_fd_, found->ai_addr, found->ai_addrlen) == 0 && ::listen(listen_fd_, 16) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    const std::string why = std::strerror(errno);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw std::runtime_error("cannot bind the replication endpoint on " + host + ":0: " + why);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  const auto port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  endpoint_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

ReplicaServer::~ReplicaServer() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& s : served_) s.thread.join();
  ::close(listen_fd_);
}

void ReplicaServer::accept_loop() {
  constexpr std::size_t kMaxConnections = 16;
  while (!stop_) {
    served_.remove_if([](Served& s) {
      if (!s.done->load()) return false;
      s.thread.join();
      return true;
    });
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (served_.size() >= kMaxConnections) {
      ::close(fd);  // the peer retries with its next step
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    served_.push_back({std::thread([this, fd, done, peer = address_of(addr)] {
                         serve(fd, peer);
                         *done = true;
                       }),
                       done});
  }
}

void ReplicaServer::accept_pushes_of(std::optional<std::set<int>> ranks) {
  std::lock_guard lock(ranks_mu_);
  push_ranks_ = std::move(ranks);
}

bool ReplicaServer::accepts_push_of(int rank) const {
  std::lock_guard lock(ranks_mu_);
  return !push_ranks_ || push_ranks_->count(rank) > 0;
}

void ReplicaServer::serve(int fd, const std::string& peer) {
  auto log = ctrun::log::get("checkpoint");
  Connection conn(fd, stop_, idle_);
  if (secret_) {
    // Before any frame: a peer that does not prove the job's secret gets nothing and leaves nothing.
    try {
      auth::check_client(fd, *secret_, auth::Purpose::kReplica,
                         std::chrono::steady_clock::now() + std::chrono::milliseconds(auth::kServerTimeout), &stop_);
    } catch (const auth::AuthError& e) {
      if (e.failure() != auth::Failure::kStopped)
        log->warn("refused the replication connection from {}: {}", peer, e.what());
      return;
    }
  }
  try {
    const Frame first = conn.receive_frame();
    if (first.kind == FrameKind::kGet) {
      const int file = open_held(dir_, first.rank, first.step);
      if (file < 0)
        return conn.send_refusal("this node holds no step " + std::to_string(first.step) + " of rank " +
                                 std::to_string(first.rank));
      struct stat st {};
      ::fstat(file, &st);
      try {
        conn.send_frame({FrameKind::kData, first.rank, first.step, static_cast<std::uint64_t>(st.st_size)});
        conn.send_file(file, static_cast<std::uint64_t>(st.st_size));
      } catch (...) {
        ::close(file);
        throw;
      }
      ::close(file);
      return;
    }
    if (first.kind != FrameKind::kPut) return conn.send_refusal("expected put or get");
    if (!accepts_push_of(first.rank)) {
      log->warn("refused a replica of rank {} step {} from {}: this node holds replicas only for the nodes whose ring "
                "sends to it",
                first.rank, first.step, peer);
      return conn.send_refusal("this node does not hold replicas of rank " + std::to_string(first.rank) +
                               " (the ring of this round assigns it another node)");
    }
    std::unique_ptr<Incoming> in;
    try {
      in = std::make_unique<Incoming>(dir_, replica_dir_name(first.rank), first.step, first.size, limit_);
    } catch (const std::exception& e) {
      log->warn("refused the replica of rank {} step {}: {}", first.rank, first.step, e.what());
      return conn.send_refusal(e.what());
    }
    conn.send_frame({FrameKind::kOk, first.rank, first.step, 0});
    receive_body(conn, *in, first.size);
    const Frame end = conn.receive_frame();
    if (end.kind != FrameKind::kCommit) return;  // aborted: the sender's file changed under it; nothing kept
    if (const std::string problem = check_snapshot(in->path().string(), first.rank, first.step); !problem.empty()) {
      log->warn("refused the replica of rank {} step {} from {}: {}", first.rank, first.step, peer, problem);
      return conn.send_refusal("the replica of rank " + std::to_string(first.rank) + " step " +
                               std::to_string(first.step) + " failed its check: " + problem);
    }
    in->commit(dir_, true);
    received_ += first.size;
    conn.send_frame({FrameKind::kOk, first.rank, first.step, 0});
  } catch (const std::exception& e) {
    log->info("replication connection ended: {} (nothing it carried was kept)", e.what());
  }
}

void push_snapshot(const std::string& endpoint, int rank, std::int64_t step, const std::string& file,
                   const std::atomic<bool>& stop, std::chrono::milliseconds idle, const auth::Secret* secret) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(sys_error("cannot open " + file));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  ::fstat(fd, &st);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  Connection conn = open_to(endpoint, stop, idle, secret);
  conn.send_frame({FrameKind::kPut, rank, step, size});
  Frame reply = conn.receive_frame();
  if (reply.kind == FrameKind::kRefused) throw std::runtime_error(endpoint + " refused: " + conn.receive_text(reply));
  conn.send_file(fd, size);
  // Still the snapshot of `step`? A save that reused its pages renamed it away first.
  struct stat now {};
  const bool same = ::stat(file.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev;
  conn.send_frame({same ? FrameKind::kCommit : FrameKind::kAbort, rank, step, 0});
  if (!same) throw std::runtime_error("step " + std::to_string(step) + " was replaced while it was being sent");
  reply = conn.receive_frame();
  if (reply.kind == FrameKind::kRefused) throw std::runtime_error(endpoint + " refused: " + conn.receive_text(reply));
}

std::uint64_t fetch_snapshot(const std::string& endpoint, int rank, std::int64_t step, const std::string& job_dir,
                             std::uint64_t limit, const std::atomic<bool>& stop, std::chrono::milliseconds idle,
                             const auth::Secret* secret) {
  Connection conn = open_to(endpoint, stop, idle, secret);
  conn.send_frame({FrameKind::kGet, rank, step, 0});
  const Frame reply = conn.receive_frame();
  if (reply.kind == FrameKind::kRefused) throw std::runtime_error(endpoint + ": " + conn.receive_text(reply));
  if (reply.kind != FrameKind::kData) throw std::runtime_error(endpoint + " answered a fetch with no data");
  Incoming in(job_dir, rank_dir_name(rank), step, reply.size, limit);
  receive_body(conn, in, reply.size);
  if (const std::string problem = check_snapshot(in.path().string(), rank, step); !problem.empty())
    throw std::runtime_error("the copy of rank " + std::to_string(rank) + " step " + std::to_string(step) + " from " +
                             endpoint + " failed its check: " + problem);
  in.commit(job_dir, false);
  return reply.size;
}

}  // namespace ctrun::agent::checkpoint
