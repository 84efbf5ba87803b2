#include "agent/checkpoint/replica_wire.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/auth/handshake.hpp"

namespace ctrun::agent::checkpoint {
namespace {

template <typename T>
void put(char* at, T value) {
  std::memcpy(at, &value, sizeof(T));  // host order: both ends are this program on the same kind of machine
}

template <typename T>
T take(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

constexpr auto kSlice = std::chrono::milliseconds(100);

}  // namespace

void size_socket_buffers(int fd) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBuffer, sizeof(kSocketBuffer));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBuffer, sizeof(kSocketBuffer));
}

std::array<char, kFrameBytes> encode_frame(const Frame& f) {
  std::array<char, kFrameBytes> out{};
  put(out.data(), kFrameMagic);
  put(out.data() + 4, static_cast<std::uint32_t>(f.kind));
  put(out.data() + 8, f.rank);
  put(out.data() + 16, f.step);
  put(out.data() + 24, f.size);
  return out;
}

Frame decode_frame(const std::array<char, kFrameBytes>& bytes) {
  // Handshake bytes where a frame was expected: the peer has a job secret and this agent has none (or the other way).
  if (auth::is_handshake(bytes.data(), bytes.size()))
    throw std::runtime_error(
        "the other agent holds a job secret and this one none (or it refused this one for having none): give every "
        "agent of the job the same --secret-file or CTRUN_SECRET");
  if (take<std::uint32_t>(bytes.data()) != kFrameMagic)
    throw std::runtime_error("not a ctrun replication peer (bad frame magic)");
  Frame f;
  const auto kind = take<std::uint32_t>(bytes.data() + 4);
  if (kind < static_cast<std::uint32_t>(FrameKind::kPut) || kind > static_cast<std::uint32_t>(FrameKind::kData))
    throw std::runtime_error("unknown replication frame kind " + std::to_string(kind));
  f.kind = static_cast<FrameKind>(kind);
  f.rank = take<std::int32_t>(bytes.data() + 8);
  f.step = take<std::int64_t>(bytes.data() + 16);
  f.size = take<std::uint64_t>(bytes.data() + 24);
  if (f.rank < 0 || f.step < 0) throw std::runtime_error("replication frame with a negative rank or step");
  return f;
}

Connection::Connection(int fd, const std::atomic<bool>& stop, std::chrono::milliseconds idle)
    : fd_(fd), stop_(&stop), idle_(idle) {}

Connection::Connection(Connection&& other) noexcept
    : fd_(other.fd_), stop_(other.stop_), idle_(other.idle_), lowat_(other.lowat_) {
  other.fd_ = -1;
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

Connection Connection::connect(const std::string& endpoint, const std::atomic<bool>& stop,
                               std::chrono::milliseconds idle) {
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("replication endpoint '" + endpoint + "' is not host:port");
  std::string host = endpoint.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), endpoint.substr(colon + 1).c_str(), &hints, &found); rc != 0)
    throw std::runtime_error("cannot resolve replication peer " + endpoint + ": " + ::gai_strerror(rc));
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  }
  Connection conn(fd, stop, idle);
  size_socket_buffers(fd);
  const int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  const int err = errno;
  ::freeaddrinfo(found);
  if (rc != 0 && err != EINPROGRESS)
    throw std::runtime_error("cannot connect to replication peer " + endpoint + ": " + std::strerror(err));
  conn.await(POLLOUT);
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0)
    throw std::runtime_error("cannot connect to replication peer " + endpoint + ": " + std::strerror(so_error));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return conn;
}

void Connection::await(short events) {
  auto waited = std::chrono::milliseconds(0);
  for (;;) {
    if (stop_->load()) throw std::runtime_error("replication stopped (the agent is ending)");
    pollfd p{fd_, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(kSlice.count()));
    if (rc > 0) return;  // ready, or an error the next call reports
    if (rc < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    waited += kSlice;
    if (waited >= idle_)
      throw std::runtime_error("the replication peer made no progress for " + std::to_string(idle_.count()) + " ms");
  }
}

void Connection::send(const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd_, at, size, MSG_NOSIGNAL);
    if (n > 0) {
      at += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      await(POLLOUT);
    } else {
      throw std::runtime_error(std::string("replication send failed: ") + std::strerror(errno));
    }
  }
}

void Connection::receive(void* data, std::size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd_, at, size, 0);
    if (n > 0) {
      at += n;
      size -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw std::runtime_error("the replication peer closed the connection mid-message");
    } else if (errno == EAGAIN || errno == EINTR) {
      batch_receives(size);
      await(POLLIN);
    } else {
      throw std::runtime_error(std::string("replication receive failed: ") + std::strerror(errno));
    }
  }
}

void Connection::batch_receives(std::size_t remaining) {
  // Never more than what is still to come: poll would not report the last bytes of a message (only the peer's
  // close or an error), and the wait would end in the idle timeout.
  const int want = static_cast<int>(std::min(remaining, kBatch));
  if (want == lowat_) return;
  if (::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) lowat_ = want;
}

void Connection::send_file(int fd, std::uint64_t size) {
  off_t offset = 0;
  while (static_cast<std::uint64_t>(offset) < size) {
    const std::size_t chunk = std::min<std::uint64_t>(size - static_cast<std::uint64_t>(offset), 8u << 20);
    const ssize_t n = ::sendfile(fd_, fd, &offset, chunk);
    if (n > 0) continue;
    if (n == 0) throw std::runtime_error("the snapshot file ended early (it was removed while being sent)");
    if (errno == EAGAIN || errno == EINTR) {
      await(POLLOUT);
      continue;
    }
    throw std::runtime_error(std::string("replication sendfile failed: ") + std::strerror(errno));
  }
}

void Connection::receive_file(int fd, std::uint64_t offset, std::uint64_t size) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("replication pipe: ") + std::strerror(errno));
  struct PipeCloser {
    int* fds;
    ~PipeCloser() {
      ::close(fds[0]);
      ::close(fds[1]);
    }
  } closer{pipe_fds};
  const int grown = ::fcntl(pipe_fds[1], F_SETPIPE_SZ, static_cast<int>(kBatch) * 4);
  const std::size_t capacity = grown > 0 ? static_cast<std::size_t>(grown) : 64u << 10;
  auto at = static_cast<loff_t>(offset);
  std::uint64_t left = size;
  while (left > 0) {
    // The pipe is empty here (drained below), so EAGAIN means the socket has nothing yet.
    const ssize_t in = ::splice(fd_, nullptr, pipe_fds[1], nullptr, std::min<std::uint64_t>(left, capacity),
                                SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (in == 0) throw std::runtime_error("the replication peer closed the connection mid-message");
    if (in < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        batch_receives(left);
        await(POLLIN);
        continue;
      }
      throw std::runtime_error(std::string("replication receive failed: ") + std::strerror(errno));
    }
    left -= static_cast<std::uint64_t>(in);
    for (auto pending = static_cast<std::size_t>(in); pending > 0;) {
      const ssize_t out = ::splice(pipe_fds[0], nullptr, fd, &at, pending, SPLICE_F_MOVE);
      if (out > 0) {
        pending -= static_cast<std::size_t>(out);
      } else if (out == 0 || errno != EINTR) {
        throw std::runtime_error(std::string("writing a received snapshot failed: ") +
                                 (out == 0 ? "no progress" : std::strerror(errno)));
      }
    }
  }
}

void Connection::send_frame(const Frame& frame) {
  const auto bytes = encode_frame(frame);
  send(bytes.data(), bytes.size());
}

Frame Connection::receive_frame() {
  std::array<char, kFrameBytes> bytes{};
  // A handshake's verdict (8 bytes, then the close) comes where a frame was expected when the peer requires a job
  // secret and this agent has none: its first bytes say so before the close would.
  receive(bytes.data(), auth::kVerdictBytes);
  if (!auth::is_handshake(bytes.data(), auth::kVerdictBytes))
    receive(bytes.data() + auth::kVerdictBytes, bytes.size() - auth::kVerdictBytes);
  return decode_frame(bytes);
}

void Connection::send_refusal(const std::string& text) {
  const std::string t = text.substr(0, kMaxText);
  send_frame({FrameKind::kRefused, 0, 0, t.size()});
  send(t.data(), t.size());
}

std::string Connection::receive_text(const Frame& refused) {
  if (refused.size > kMaxText) throw std::runtime_error("replication refusal text too long");
  std::string text(refused.size, '\0');
  receive(text.data(), text.size());
  return text;
}

}  // namespace ctrun::agent::checkpoint
