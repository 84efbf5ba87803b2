// Replication throughput (agent/checkpoint/replica_transfer.hpp) against its floor, side by side in one run:
//   floor:        a loopback TCP stream of the same bytes, memory to memory (send from a buffer, recv into one
//                 reused 8 MiB buffer), the kernel's default socket settings: what its TCP path gives here
//   for context:  the same stream received over the snapshot's size of (touched) memory, and the same stream with
//                 replication's socket buffers (replica_wire.hpp)
//   replication:  push_snapshot of a snapshot file in /dev/shm to a ReplicaServer on 127.0.0.1, which allocates a
//                 replica file in its own /dev/shm directory, receives into its mmap, checks its digest
//                 (snapshot_digest.hpp) and renames it (what an agent does for each step); then the same with the
//                 job's secret (docs/security.md: the handshake on every connection), and the digest check alone
// Usage: replication_bench [MiB=128] [reps=7]. Prints the median of `reps` runs of each, and the ratio.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/checkpoint/job_directory.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/replica_transfer.hpp"
#include "agent/checkpoint/replica_wire.hpp"
#include "agent/checkpoint/snapshot_digest.hpp"
#include "common/auth/handshake.hpp"
#include "common/auth/secret.hpp"

namespace ck = ctrun::agent::checkpoint;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One memory-to-memory stream of `bytes` over loopback TCP into `sink` (its size: how much memory the receiver
// writes over, reused from the start when smaller than `bytes`); seconds.
double tcp_stream(std::size_t bytes, std::vector<char>& sink, bool sized_buffers = false) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (sized_buffers) ck::size_socket_buffers(listener);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  ::listen(listener, 1);
  std::thread receiver([listener, bytes, &sink] {
    const int fd = ::accept(listener, nullptr, nullptr);
    std::size_t got = 0;
    while (got < bytes) {
      const std::size_t at = got % sink.size();
      const ssize_t n = ::recv(fd, sink.data() + at, std::min(sink.size() - at, bytes - got), 0);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  std::vector<char> src(bytes, 1);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (sized_buffers) ck::size_socket_buffers(fd);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const auto began = Clock::now();
  ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::size_t sent = 0;
  while (sent < bytes) {
    const ssize_t n = ::send(fd, src.data() + sent, std::min<std::size_t>(8u << 20, bytes - sent), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  receiver.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  ::close(fd);
  ::close(listener);
  return seconds;
}

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// One handshake over a socketpair, both sides in this process (a thread for the server): seconds.
double one_handshake(const ctrun::auth::Secret& secret) {
  int fds[2];
  ::socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  const auto began = Clock::now();
  std::thread server([&] { ctrun::auth::check_client(fds[1], secret, ctrun::auth::Purpose::kReplica, deadline); });
  ctrun::auth::prove_to_server(fds[0], secret, ctrun::auth::Purpose::kReplica, deadline, "bench");
  server.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  ::close(fds[0]);
  ::close(fds[1]);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 128;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const std::size_t bytes = mib << 20;
  const std::string root_a = "/dev/shm", root_b = "/dev/shm";
  // Two directories as two agents would have (pids as names: this process's and a made-up one beside it).
  ck::JobDirectory a(static_cast<int>(::getpid()), root_a);
  const std::string b_path = root_b + "/ctrun-replication-bench-" + std::to_string(::getpid());
  fs::create_directories(b_path);
  std::ofstream(b_path + "/lock").flush();
  const fs::path file = fs::path(a.path()) / ck::rank_dir_name(0) / ck::step_file_name(1);
  fs::create_directories(file.parent_path());
  {
    // A snapshot as a worker of a multi-node job writes it: header, body, digest trailer.
    const std::string header = R"({"step": 1, "rank": 0})";
    std::string bytes_of_file = "CTRUNCK1";
    for (int i = 0; i < 8; ++i) bytes_of_file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes_of_file += header;
    bytes_of_file.resize(bytes_of_file.size() + bytes, 7);
    bytes_of_file += ck::digest_trailer(bytes_of_file.data(), bytes_of_file.size());
    std::ofstream(file, std::ios::binary).write(bytes_of_file.data(), static_cast<std::streamsize>(bytes_of_file.size()));
  }
  std::atomic<bool> stop{false};
  std::vector<double> floor, floor_whole, floor_sized, replication, with_secret, digest, digest_cpu, handshakes;
  const auto secret = std::make_shared<const ctrun::auth::Secret>(ctrun::auth::Secret::generate("the benchmark"));
  // The floor's receiver rewrites one 8 MiB buffer (cache-warm); "whole" writes over the snapshot's size of memory,
  // touched beforehand, as a replica's receiver does: what the destination's size alone costs.
  std::vector<char> sink(std::min<std::size_t>(bytes, 8u << 20), 0), whole(bytes, 0);
  {
    ck::ReplicaServer server(b_path, std::uint64_t{1} << 40, "127.0.0.1");
    ck::ReplicaServer closed(b_path, std::uint64_t{1} << 40, "127.0.0.1", ck::kTransferIdle, secret);
    auto timed = [](auto&& fn) {
      const auto began = Clock::now();
      fn();
      return std::chrono::duration<double>(Clock::now() - began).count();
    };
    for (int i = 0; i < reps; ++i) {
      floor.push_back(tcp_stream(bytes, sink));
      floor_whole.push_back(tcp_stream(bytes, whole));
      floor_sized.push_back(tcp_stream(bytes, sink, true));
      replication.push_back(timed([&] { ck::push_snapshot(server.endpoint(), 0, 1, file.string(), stop); }));
      with_secret.push_back(timed([&] {
        ck::push_snapshot(closed.endpoint(), 0, 1, file.string(), stop, ck::kTransferIdle, secret.get());
      }));
      const double cpu = cpu_seconds();
      digest.push_back(timed([&] {
        if (!ck::check_snapshot(file.string(), 0, 1).empty()) std::abort();
      }));
      digest_cpu.push_back(cpu_seconds() - cpu);
    }
  }
  for (int i = 0; i < 200; ++i) handshakes.push_back(one_handshake(*secret));
  std::error_code ec;
  fs::remove_all(b_path, ec);
  const double f = static_cast<double>(bytes) / median(floor) / 1e9,
               w = static_cast<double>(bytes) / median(floor_whole) / 1e9,
               z = static_cast<double>(bytes) / median(floor_sized) / 1e9,
               r = static_cast<double>(bytes) / median(replication) / 1e9,
               c = static_cast<double>(bytes) / median(with_secret) / 1e9;
  std::printf("snapshot %zu MiB, median of %d\n", mib, reps);
  std::printf("  loopback TCP stream (floor)   %7.2f GB/s\n", f);
  std::printf("  the same into %zu MiB         %7.2f GB/s   %5.1f %% of the floor\n", mib, w, 100.0 * w / f);
  std::printf("  the same, replication's socket buffers %5.2f GB/s   %5.1f %% of the floor\n", z, 100.0 * z / f);
  std::printf("  replication (push_snapshot)   %7.2f GB/s   %5.1f %% of the floor   %.3f s\n", r, 100.0 * r / f,
              median(replication));
  std::printf("  the same with a job secret    %7.2f GB/s   %5.1f %% of the floor   %.3f s\n", c, 100.0 * c / f,
              median(with_secret));
  std::printf("  the receiver's digest check alone              %.3f s (%.2f GB/s), %.3f s of CPU (%.2f GB/s)\n",
              median(digest), static_cast<double>(bytes) / median(digest) / 1e9, median(digest_cpu),
              static_cast<double>(bytes) / median(digest_cpu) / 1e9);
  std::printf("  one handshake (both sides, a socketpair)       %.1f us (median of %zu)\n", median(handshakes) * 1e6,
              handshakes.size());
  return 0;
}
