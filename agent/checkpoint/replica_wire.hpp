#pragma once
// The agents' replication protocol (docs/checkpoint.md, "Replication"): fixed 32-byte frames over a TCP connection
// of their own, and the connection's blocking reads and writes, each bounded (no progress for `idle` seconds is an
// error) and cancellable (a stop flag, looked at every 100 ms). Used on the replication threads only, never on the
// agent's loop.
//
//   push:  -> put(rank, step, size)  <- ok | refused+text   -> size bytes   -> commit | abort   <- ok | refused+text
//   fetch: -> get(rank, step)        <- data(size)+bytes | refused+text
//
// A receiver counts a put's size against its --checkpoint-memory before it allocates anything, and makes the replica
// visible only on commit (a rename), so a peer that dies mid-transfer leaves nothing behind and changes nothing held.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace ctrun::agent::checkpoint {

enum class FrameKind : std::uint32_t { kPut = 1, kGet = 2, kCommit = 3, kAbort = 4, kOk = 5, kRefused = 6, kData = 7 };

struct Frame {
  FrameKind kind = FrameKind::kOk;
  std::int32_t rank = 0;
  std::int64_t step = 0;
  std::uint64_t size = 0;  // put: the snapshot's bytes; data: the bytes that follow; refused: the text that follows
};

inline constexpr std::size_t kFrameBytes = 32;
inline constexpr std::uint32_t kFrameMagic = 0x43'4b'52'31;  // "CKR1"
// The longest refusal text a peer may send (a frame's size is never trusted to allocate more).
inline constexpr std::uint64_t kMaxText = 4096;

// Socket buffers of a replication connection, each direction (the kernel caps them at net.core.[rw]mem_max): a
// snapshot stream keeps the sender going while the receiver copies a large batch (with kBatch below), where the
// autotuned default left the two taking turns. Kernel memory, bounded per connection like everything else here.
inline constexpr int kSocketBuffer = 4 << 20;
// A receiver waits until this much has arrived (SO_RCVLOWAT; less when less is still to come) before it wakes to
// copy: fewer, larger copies. On a loaded 2-core machine, waking per segment cost a third of the throughput.
inline constexpr std::size_t kBatch = 256 << 10;

// Sets kSocketBuffer both ways on `fd` (before connect or listen, so the window scale fits it).
void size_socket_buffers(int fd);

std::array<char, kFrameBytes> encode_frame(const Frame& frame);
// Throws std::runtime_error for bytes that are not a frame (wrong magic, unknown kind, a negative rank or step); for
// the job's handshake (common/auth/handshake.hpp) in their place, one that says the two agents disagree about the
// job's secret.
Frame decode_frame(const std::array<char, kFrameBytes>& bytes);

// One connected socket (owned). Every call throws std::runtime_error saying what failed: the peer closed, `idle`
// passed with no progress, or `stop` was set.
class Connection {
 public:
  Connection(int fd, const std::atomic<bool>& stop, std::chrono::milliseconds idle);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to "host:port" (bounded by `idle`).
  static Connection connect(const std::string& endpoint, const std::atomic<bool>& stop, std::chrono::milliseconds idle);
  Connection(Connection&& other) noexcept;

  void send(const void* data, std::size_t size);
  void receive(void* data, std::size_t size);
  // Sends `size` bytes of file `fd` from offset 0 with sendfile(2): no copy through user memory. sendfile has no
  // MSG_NOSIGNAL: a peer that left raises SIGPIPE, which ctrun ignores process-wide (agent.cpp), so it is EPIPE here.
  void send_file(int fd, std::uint64_t size);

  // Receives `size` bytes into file `fd` from `offset` with splice(2) through a pipe: the socket's pages move
  // into the pipe and are copied once, into the file's pages, with no mapping of the file to set up and tear down.
  void receive_file(int fd, std::uint64_t offset, std::uint64_t size);

  int fd() const { return fd_; }
  void send_frame(const Frame& frame);
  Frame receive_frame();
  void send_refusal(const std::string& text);
  // The text of a refusal whose frame was just received.
  std::string receive_text(const Frame& refused);

 private:
  void await(short events);
  void batch_receives(std::size_t remaining);
  int fd_;
  const std::atomic<bool>* stop_;
  std::chrono::milliseconds idle_;
  int lowat_ = 1;  // the SO_RCVLOWAT set on fd_ (1: the kernel's default)
};

}  // namespace ctrun::agent::checkpoint
