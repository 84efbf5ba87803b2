#pragma once
// A real etcd cluster for tests: N members on 127.0.0.1 on ports reserved for the cluster's lifetime
// (port_reservation.hpp: etcd binds them, nothing else can), data in a temporary directory, started with fork/exec and
// stopped by PID (SIGKILL), also when a test fails. skip_reason() is non-empty when the etcd binary is missing (tests
// GTEST_SKIP with it).

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd/etcd_client.hpp"
#include "tests/support/port_reservation.hpp"

namespace ctrun::rdzv::test {

inline std::string etcd_binary() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

class EtcdCluster {
 public:
  static std::string skip_reason() {
    return etcd_binary().empty() ? "etcd is not installed (Debian package etcd-server)" : "";
  }

  explicit EtcdCluster(int members) {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("ctrun-etcd-") + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    std::string initial;
    for (int i = 0; i < members; ++i) {
      reserved_.emplace_back();
      clients_.push_back(reserved_.back().port());
      reserved_.emplace_back();
      peers_.push_back(reserved_.back().port());
      initial += std::string(i ? "," : "") + name(i) + "=http://127.0.0.1:" + std::to_string(peers_[i]);
    }
    initial_ = initial;
    pids_.assign(members, -1);
    for (int i = 0; i < members; ++i) start(i);
    wait_healthy();
  }
  ~EtcdCluster() {
    for (int i = 0; i < static_cast<int>(pids_.size()); ++i) kill(i);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string endpoint(int i) const { return "127.0.0.1:" + std::to_string(clients_[i]); }
  std::string endpoints() const {
    std::string out;
    for (int i = 0; i < static_cast<int>(clients_.size()); ++i) out += std::string(i ? "," : "") + endpoint(i);
    return out;
  }
  // SIGKILL member i (no clean shutdown), and reap it.
  void kill(int i) {
    if (pids_[i] <= 0) return;
    ::kill(pids_[i], SIGKILL);
    ::waitpid(pids_[i], nullptr, 0);
    pids_[i] = -1;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  static std::string name(int i) { return std::string("m") + std::to_string(i); }

  void start(int i) {
    const auto client = "http://127.0.0.1:" + std::to_string(clients_[i]);
    const auto peer = "http://127.0.0.1:" + std::to_string(peers_[i]);
    std::vector<std::string> args = {etcd_binary(),
                                     "--name",
                                     name(i),
                                     "--data-dir",
                                     (dir_ / name(i)).string(),
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     initial_,
                                     "--initial-cluster-state",
                                     "new",
                                     "--heartbeat-interval",
                                     "100",
                                     "--election-timeout",
                                     "1000",
                                     "--log-level",
                                     "error"};
    const auto log = (dir_ / (name(i) + ".log")).string();
    pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      if (FILE* f = std::fopen(log.c_str(), "w")) {
        ::dup2(fileno(f), 1);
        ::dup2(fileno(f), 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pids_[i] = pid;
  }

  // Every member serves a linearizable read (bounded: 30 s).
  void wait_healthy() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int i = 0; i < static_cast<int>(clients_.size()); ++i) {
      etcd::Options o;
      o.endpoints = {Endpoint{"127.0.0.1", static_cast<std::uint16_t>(clients_[i])}};
      o.request_timeout = o.attempt_timeout = std::chrono::seconds(1);
      etcd::Client client(o);
      while (std::chrono::steady_clock::now() < deadline) {
        try {
          client.range("health");  // linearizable: answers once the cluster has a leader
          break;
        } catch (const std::exception&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    }
  }

  std::filesystem::path dir_;
  std::string initial_;
  std::vector<ctrun::test::PortReservation> reserved_;  // declared first: released after every member is killed
  std::vector<int> clients_, peers_;
  std::vector<pid_t> pids_;
};

}  // namespace ctrun::rdzv::test
