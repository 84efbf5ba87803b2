#pragma once
// Many connections at once, as thousands of ranks hitting the store at job start: every connection opens,
// sends ADD "init/" 1 (what each torch client sends first) and waits for its reply. One thread drives all of
// them with non-blocking sockets and epoll, so the client is not the bottleneck.

#include <chrono>
#include <cstdint>
#include <vector>

namespace ctrun::bench {

// Open connections; closes them on destruction (used to hold idle connections for the memory measurement).
class ConnectionSet {
 public:
  ConnectionSet() = default;
  ConnectionSet(const ConnectionSet&) = delete;
  ConnectionSet& operator=(const ConnectionSet&) = delete;
  ConnectionSet(ConnectionSet&& other) noexcept : fds_(std::move(other.fds_)) { other.fds_.clear(); }
  ~ConnectionSet();
  std::vector<int>& fds() { return fds_; }

 private:
  std::vector<int> fds_;
};

struct StormResult {
  double seconds = 0;  // first connect() to last reply
  int reconnects = 0;  // connections refused/reset and retried (as real clients retry)
  ConnectionSet connections;
};

// Throws std::runtime_error if not every reply arrived within timeout.
StormResult run_storm(std::uint16_t port, int connections, std::chrono::seconds timeout);

}  // namespace ctrun::bench
