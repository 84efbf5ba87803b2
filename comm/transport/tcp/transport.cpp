#include "comm/transport/tcp/transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/log.hpp"

namespace ctrun::comm::transport::tcp {
namespace {

constexpr std::uint32_t kHelloMagic = 0x4d435443;  // "CTCM"
// A liveness watch (see watch_lower_peers): the acceptor keeps it open, never reads it, closes it with the group.
constexpr std::uint32_t kWatchMagic = 0x57435443;  // "CTCW"
constexpr auto kWatchRetry = std::chrono::seconds(1);

std::string errno_text() { return std::strerror(errno); }

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const std::string& host, const std::string& port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &out.list);
  if (rc != 0) throw CommError("comm tcp: cannot resolve '" + host + "': " + gai_strerror(rc));
}

// Kernel socket buffers (Options::buffer_bytes). 0, the default, keeps the kernel's autotuning (as gloo does):
// on loopback it was as fast as or faster than fixed 1-4 MiB buffers for 1-64 MiB collectives (fixed 4 MiB
// buffers, doubled by the kernel, let up to 8 MiB of skbs queue per socket and push them out of the caches;
// docs/benchmarks.md), and on a real network it grows the window to the path's bandwidth-delay product
// up to net.ipv4.tcp_{w,r}mem, where a fixed size caps it. A fixed size is capped by net.core.{w,r}mem_max.
// Set before connect()/listen(), so that the window scale negotiated at the handshake covers the buffer.
void set_buffers(int fd, std::size_t buffer_bytes) {
  const int bytes = static_cast<int>(std::min<std::size_t>(buffer_bytes, std::size_t{1} << 30));
  if (bytes <= 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void set_nodelay_nonblocking(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Reads exactly n bytes from a (possibly nonblocking) socket within the deadline; false on EOF/error/timeout.
bool read_exact(int fd, void* buf, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
  }
  return true;
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(std::shared_ptr<store::Store> store, int rank, int size, Options options)
      : store_(std::move(store)),
        rank_(rank),
        size_(size),
        options_(std::move(options)),
        fds_(static_cast<std::size_t>(size), -1),
        readable_(static_cast<std::size_t>(size), 1),
        writable_(static_cast<std::size_t>(size), 1),
        lowat_(static_cast<std::size_t>(size), 1),
        paused_(static_cast<std::size_t>(size), 0),
        hung_up_(static_cast<std::size_t>(size), 0),
        errors_(static_cast<std::size_t>(size)),
        watches_(static_cast<std::size_t>(size), -1),
        watch_up_(static_cast<std::size_t>(size), 0),
        watched_by_(static_cast<std::size_t>(size), -1),
        left_(static_cast<std::size_t>(size), 0) {
    if (options_.advertise_host.empty()) options_.advertise_host = pick_advertise_host(options_.route_to);
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    listen();
    store_->set("tcp/" + std::to_string(rank_), options_.advertise_host + ":" + std::to_string(port_));
  }

  ~TcpTransport() override { close_all(); }

  std::string_view name() const override { return "tcp"; }

  bool connected(int peer) const override { return fds_[static_cast<std::size_t>(peer)] >= 0; }

  // readable_/writable_ remember that the last call found the socket drained (full); poll() in wait_event sets
  // them again. That saves the EAGAIN syscall per peer and per progress round that otherwise doubles the
  // syscall count of a ring step.
  std::size_t write_some(int peer, const void* data, std::size_t n) override {
    return write_some2(peer, nullptr, 0, data, n);
  }

  std::size_t write_some2(int peer, const void* head, std::size_t head_n, const void* body,
                          std::size_t body_n) override {
    const int fd = socket_for(peer);
    const auto idx = static_cast<std::size_t>(peer);
    if (fd < 0 || !writable_[idx]) return 0;
    iovec iov[2];
    int parts = 0;
    if (head_n) iov[parts++] = {const_cast<void*>(head), head_n};
    if (body_n) iov[parts++] = {const_cast<void*>(body), body_n};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(parts);
    const ssize_t w = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w >= 0) {
      if (static_cast<std::size_t>(w) < head_n + body_n) writable_[idx] = 0;
      return static_cast<std::size_t>(w);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      writable_[idx] = 0;
      return 0;
    }
    if (errno == EINTR) return 0;
    broken(peer, "sending failed (" + errno_text() + "): it exited or closed the group");
  }

  std::size_t read_some(int peer, void* data, std::size_t n) override {
    const int fd = socket_for(peer);
    const auto idx = static_cast<std::size_t>(peer);
    if (fd < 0 || !readable_[idx]) return 0;
    const ssize_t r = ::recv(fd, data, n, MSG_DONTWAIT);
    if (r > 0) {
      if (static_cast<std::size_t>(r) < n) readable_[idx] = 0;
      return static_cast<std::size_t>(r);
    }
    if (r == 0) broken(peer, "closed its connection: it exited or destroyed its process group");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      readable_[idx] = 0;
      return 0;
    }
    if (errno == EINTR) return 0;
    broken(peer, "receiving failed (" + errno_text() + "): it exited or closed the group");
  }

  // When enabled, wakes poll() only once a useful amount of a payload is queued, not per 64 KiB segment. Capped
  // (<= 1 MiB) well below the receive buffer so the sender can always fill it; an EOF or error still wakes poll
  // at once, and wait_event never sleeps more than 1 s.
  void expect_bytes(int peer, std::size_t bytes) override {
    const auto idx = static_cast<std::size_t>(peer);
    const int fd = fds_[idx];
    if (fd < 0 || options_.lowat_bytes == 0) return;
    const int want = static_cast<int>(std::clamp<std::size_t>(bytes, 1, options_.lowat_bytes));
    if (lowat_[idx] == want) return;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) lowat_[idx] = want;
  }

  void pause_reads(int peer, bool paused) override { paused_[static_cast<std::size_t>(peer)] = paused ? 1 : 0; }

  std::uint64_t event_token() override { return 0; }  // poll() is level-triggered: no token needed

  void wait_event(std::uint64_t, Clock::time_point until, const std::vector<int>& want_read,
                  const std::vector<int>& want_write) override {
    if (aborted_) throw PeerError("comm tcp: this rank aborted the group");
    // A peer we must talk to and that is lower than us connects to us: make sure we are the ones connecting
    // where we are lower, so that neither side waits for the other.
    for (int peer : want_write) socket_for(peer);
    for (int peer : want_read) socket_for(peer);
    watch_lower_peers(want_read);
    pfds_.clear();
    poll_peers_.clear();
    pfds_.push_back({event_fd_, POLLIN, 0});
    pfds_.push_back({listen_fd_, POLLIN, 0});
    for (int peer = 0; peer < size_; ++peer) {
      const auto idx = static_cast<std::size_t>(peer);
      if (watches_[idx] < 0) continue;
      pfds_.push_back({watches_[idx], static_cast<short>(watch_up_[idx] ? POLLIN : POLLOUT), 0});
    }
    const std::size_t first_peer_fd = pfds_.size();
    for (int peer = 0; peer < size_; ++peer) {
      const auto idx = static_cast<std::size_t>(peer);
      const int fd = fds_[idx];
      if (fd < 0) continue;
      // A hang-up cannot be masked: a paused socket that reported one would wake every poll. Its reader finds the
      // error once it reads again.
      if (paused_[idx] && hung_up_[idx]) continue;
      short events = paused_[idx] ? 0 : POLLIN;  // hang-ups and errors are reported whatever is asked
      if (std::find(want_write.begin(), want_write.end(), peer) != want_write.end()) events |= POLLOUT;
      pfds_.push_back({fd, events, 0});
      poll_peers_.push_back(peer);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    const int timeout_ms = static_cast<int>(std::clamp<long long>(left + 1, 0, 1000));
    const int rc = poll(pfds_.data(), pfds_.size(), timeout_ms);
    if (rc <= 0) return;
    if (pfds_[0].revents & POLLIN) {
      std::uint64_t v;
      [[maybe_unused]] auto ignored = ::read(event_fd_, &v, sizeof v);
    }
    for (std::size_t i = 2; i < first_peer_fd; ++i) {
      if (pfds_[i].revents) on_watch_event(pfds_[i].fd);
    }
    for (std::size_t i = 0; i < poll_peers_.size(); ++i) {
      const short rev = pfds_[i + first_peer_fd].revents;
      const auto idx = static_cast<std::size_t>(poll_peers_[i]);
      // Errors and hang-ups count as both: the next read or write reports them.
      if (rev & (POLLIN | POLLHUP | POLLERR)) readable_[idx] = 1;
      if (rev & (POLLHUP | POLLERR)) hung_up_[idx] = 1;
      if (rev & (POLLOUT | POLLHUP | POLLERR)) writable_[idx] = 1;
    }
    if (pfds_[1].revents & POLLIN) accept_pending();
  }

  void interrupt() override {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto ignored = ::write(event_fd_, &one, sizeof one);
  }

  void abort(const std::string&) override {
    aborted_ = true;
    for (int fd : watched_by_) {
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // watchers learn of the abort at once
    }
    // shutdown() rather than close(): peers see EOF at once and fail their ops with this rank, while our fds stay
    // valid until the destructor.
    for (int fd : fds_) {
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
    // Peers that never connected to us (lazy connection) are refused from now on instead of connecting to a
    // listener nobody accepts from and waiting out their timeout (see connect_to).
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

 private:
  [[noreturn]] void broken(int peer, const std::string& what) {
    auto& fd = fds_[static_cast<std::size_t>(peer)];
    if (fd >= 0) ::close(fd);
    fd = -1;
    errors_[static_cast<std::size_t>(peer)] = "rank " + std::to_string(peer) + " " + what;
    throw PeerError(errors_[static_cast<std::size_t>(peer)]);
  }

  // The peer's socket; connects (lower rank) or accepts whatever is pending (higher rank); -1 if not yet there.
  int socket_for(int peer) {
    const auto idx = static_cast<std::size_t>(peer);
    if (fds_[idx] >= 0) return fds_[idx];
    if (!errors_[idx].empty()) throw PeerError(errors_[idx]);
    if (aborted_) throw PeerError("comm tcp: this rank aborted the group");
    if (rank_ < peer) {
      connect_to(peer);
    } else {
      accept_pending();
    }
    return fds_[idx];
  }

  // A receive waiting on a lower rank that never connected (a receive from any source, or one from a rank that has
  // sent this one nothing yet) has no socket through which that rank's exit could show. Such a rank gets a watch:
  // a connection to its listener whose hello says "watch", which it keeps open and never reads. Refused, or
  // closed later, means its process is gone (or it aborted or closed the group): the next read from that rank
  // fails, naming it, instead of the receive waiting for the group timeout. One per pair, made only once such a
  // wait has lasted a second (so never on the way of a group's first messages), closed once the rank connects. A
  // rank that closes its group in order writes one byte on its watches first: it left, and nothing fails.
  void watch_lower_peers(const std::vector<int>& want_read) {
    for (int peer = 0; peer < rank_; ++peer) {
      const auto idx = static_cast<std::size_t>(peer);
      if (watches_[idx] >= 0 && fds_[idx] >= 0) close_watch(peer);
    }
    bool wanted = false;
    for (int peer : want_read) wanted |= peer < rank_ && fds_[static_cast<std::size_t>(peer)] < 0;
    const auto now = Clock::now();
    if (!wanted) {
      waiting_since_ = {};
      return;
    }
    // A peer usually connects within milliseconds of the first wait: only a wait that lasts gets watches.
    if (waiting_since_ == Clock::time_point{}) waiting_since_ = now;
    if (now - waiting_since_ < kWatchRetry || now - last_watch_try_ < kWatchRetry) return;
    last_watch_try_ = now;
    for (int peer : want_read) {
      const auto idx = static_cast<std::size_t>(peer);
      if (peer >= rank_ || fds_[idx] >= 0 || watches_[idx] >= 0 || !errors_[idx].empty() || left_[idx]) continue;
      start_watch(peer);
    }
  }

  void start_watch(int peer) {
    const std::string key = "tcp/" + std::to_string(peer);
    if (!store_->check({key})) return;
    const std::string addr = store_->get(key);
    const auto colon = addr.rfind(':');
    AddrInfo ai;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    if (getaddrinfo(addr.substr(0, colon).c_str(), addr.substr(colon + 1).c_str(), &hints, &ai.list) != 0 || !ai.list) {
      return;
    }
    const int fd = socket(ai.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    if (::connect(fd, ai.list->ai_addr, ai.list->ai_addrlen) == 0 || errno == EINPROGRESS) {
      watches_[static_cast<std::size_t>(peer)] = fd;
      watch_up_[static_cast<std::size_t>(peer)] = 0;
      return;
    }
    const int err = errno;
    ::close(fd);
    if (err == ECONNREFUSED) gone(peer);
  }

  void on_watch_event(int fd) {
    const auto it = std::find(watches_.begin(), watches_.end(), fd);
    if (it == watches_.end()) return;
    const int peer = static_cast<int>(it - watches_.begin());
    const auto idx = static_cast<std::size_t>(peer);
    if (!watch_up_[idx]) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      const std::uint32_t hello[2] = {kWatchMagic, static_cast<std::uint32_t>(rank_)};
      if (err == 0 &&
          ::send(fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof hello)) {
        watch_up_[idx] = 1;
        return;
      }
      close_watch(peer);
      if (err == ECONNREFUSED || err == ECONNRESET) gone(peer);
      return;  // anything else: tried again later
    }
    char byte = 0;
    const ssize_t r = ::recv(fd, &byte, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    close_watch(peer);
    if (r > 0) {
      left_[idx] = 1;  // its group closed in order (close_all's byte): it left, it did not fail
    } else {
      gone(peer);
    }
  }

  // The next use of `peer` reports it (so the messenger fails only what waits on that peer).
  void gone(int peer) {
    const auto idx = static_cast<std::size_t>(peer);
    if (fds_[idx] >= 0 || !errors_[idx].empty()) return;
    errors_[idx] = "rank " + std::to_string(peer) + " exited, aborted or closed the group (its listener refused or " +
                   "closed this rank's watch connection) while this rank was waiting for it";
  }

  void close_watch(int peer) {
    auto& fd = watches_[static_cast<std::size_t>(peer)];
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  void listen() {
    AddrInfo ai;
    // Bind where peers will connect: a loopback advertise address keeps the port off other interfaces.
    resolve(options_.advertise_host, "0", true, ai);
    for (addrinfo* a = ai.list; a; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      set_buffers(fd, options_.buffer_bytes);  // inherited by accepted sockets
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, std::max(size_, 16)) == 0) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
        port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        listen_fd_ = fd;
        return;
      }
      ::close(fd);
    }
    throw CommError("comm tcp: cannot listen on " + options_.advertise_host + ": " + errno_text() +
                    " (set CTRUN_COMM_IFADDR to an address of this host)");
  }

  void connect_to(int peer) {
    const std::string key = "tcp/" + std::to_string(peer);
    try {
      store_->wait({key}, options_.timeout);
    } catch (const store::TimeoutError&) {
      throw TimeoutError("comm tcp: rank " + std::to_string(peer) + " did not publish its address within " +
                         std::to_string(options_.timeout.count()) + " ms (it never created the group?)");
    }
    const std::string addr = store_->get(key);
    const auto colon = addr.rfind(':');
    const std::string host = addr.substr(0, colon);
    const std::string port = addr.substr(colon + 1);
    const auto deadline = Clock::now() + options_.timeout;
    std::string last_error;
    while (Clock::now() < deadline) {
      AddrInfo ai;
      resolve(host, port, false, ai);
      for (addrinfo* a = ai.list; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        set_buffers(fd, options_.buffer_bytes);
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          const std::uint32_t hello[2] = {kHelloMagic, static_cast<std::uint32_t>(rank_)};
          if (::send(fd, hello, sizeof hello, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof hello)) {
            set_nodelay_nonblocking(fd);
            fds_[static_cast<std::size_t>(peer)] = fd;
            readable_[static_cast<std::size_t>(peer)] = writable_[static_cast<std::size_t>(peer)] = 1;
            return;
          }
        }
        const int err = errno;
        last_error = errno_text();
        ::close(fd);
        // The peer listened before it published its address, so a refusal means its listener is gone: it
        // exited or closed the group (e.g. it aborted before we first needed it). Retrying would only turn
        // that into a timeout.
        if (err == ECONNREFUSED) {
          throw PeerError("comm tcp: rank " + std::to_string(peer) + " no longer accepts connections at " + addr +
                          ": it exited, aborted or closed the group");
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw PeerError("comm tcp: cannot connect to rank " + std::to_string(peer) + " at " + addr + ": " + last_error);
  }

  void accept_pending() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      std::uint32_t hello[2] = {0, 0};
      // The connecting side sends its hello right after connect(): a short bound is enough.
      const bool read = read_exact(fd, hello, sizeof hello, Clock::now() + std::chrono::seconds(5));
      if (read && hello[0] == kWatchMagic && hello[1] < static_cast<std::uint32_t>(size_) &&
          static_cast<int>(hello[1]) > rank_) {
        // Kept open, never read: the watcher sees it close when this rank's process or group ends.
        auto& kept = watched_by_[hello[1]];
        if (kept >= 0) ::close(kept);
        kept = fd;
        continue;
      }
      if (!read || hello[0] != kHelloMagic || hello[1] >= static_cast<std::uint32_t>(size_) ||
          static_cast<int>(hello[1]) >= rank_ || fds_[hello[1]] >= 0) {
        log::get("comm")->warn("comm tcp: rank {} dropped a connection with a bad hello", rank_);
        ::close(fd);
        continue;
      }
      set_nodelay_nonblocking(fd);
      fds_[hello[1]] = fd;
      readable_[hello[1]] = writable_[hello[1]] = 1;
    }
  }

  void close_all() {
    // Watches still in the listen queue (an idle rank accepts only when it polls) get their byte too.
    if (!aborted_ && listen_fd_ >= 0) accept_pending();
    for (int peer = 0; peer < size_; ++peer) close_watch(peer);
    for (int& fd : watched_by_) {
      // One byte before the close says "left in order" (after an abort's shutdown() it cannot leave).
      if (fd < 0) continue;
      const char bye = 'b';
      [[maybe_unused]] auto ignored = ::send(fd, &bye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      fd = -1;
    }
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (event_fd_ >= 0) ::close(event_fd_);
    listen_fd_ = event_fd_ = -1;
  }

  std::shared_ptr<store::Store> store_;
  int rank_;
  int size_;
  Options options_;
  int listen_fd_ = -1;
  int event_fd_ = -1;
  std::uint16_t port_ = 0;
  std::vector<int> fds_;
  std::vector<char> readable_;  // see write_some2
  std::vector<char> writable_;
  std::vector<int> lowat_;     // SO_RCVLOWAT last set per socket (1 = the kernel's default)
  std::vector<char> paused_;   // pause_reads(): no POLLIN while the reader holds the peer's next message
  std::vector<char> hung_up_;  // poll reported POLLHUP/POLLERR on the socket
  std::vector<std::string> errors_;
  std::vector<pollfd> pfds_;
  std::vector<int> poll_peers_;  // peer of pfds_[i + first_peer_fd] (after the event fd, listener and probes)
  std::vector<int> watches_;     // per lower peer: this rank's watch connection to it (-1: none), watch_lower_peers
  std::vector<char> watch_up_;   // the watch connected and said hello
  std::vector<int> watched_by_;  // per higher peer: its watch connection to this rank, kept open unread
  std::vector<char> left_;       // per lower peer: its watch said it closed its group in order (never watched again)
  Clock::time_point last_watch_try_{};
  Clock::time_point waiting_since_{};  // since when a receive waits on an unconnected lower peer (zero: none does)
  bool aborted_ = false;
};

}  // namespace

std::string pick_advertise_host(const std::string& master_addr) {
  if (!master_addr.empty()) {
    const char* master = master_addr.c_str();
    // connect() on a UDP socket only selects the route and the local address; nothing is sent.
    AddrInfo ai;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(master, "9", &hints, &ai.list) == 0) {
      for (addrinfo* a = ai.list; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0;
        ::close(fd);
        if (!ok) continue;
        char host[NI_MAXHOST];
        if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
          return host;
        }
      }
    }
  }
  return "127.0.0.1";
}

std::unique_ptr<Transport> create(std::shared_ptr<store::Store> store, int rank, int size, Options options) {
  return std::make_unique<TcpTransport>(std::move(store), rank, size, std::move(options));
}

}  // namespace ctrun::comm::transport::tcp
