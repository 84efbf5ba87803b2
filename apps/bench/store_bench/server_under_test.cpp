#include "apps/bench/store_bench/server_under_test.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace ctrun::bench {

long ServerUnderTest::rss_kib() const {
  std::ifstream in("/proc/" + std::to_string(process->pid()) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  throw std::runtime_error(name + ": no VmRSS in /proc/" + std::to_string(process->pid()) + "/status");
}

double ServerUnderTest::cpu_seconds() const {
  std::ifstream in("/proc/" + std::to_string(process->pid()) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the parenthesised command name (which may contain spaces): state is field 3, utime 14,
  // stime 15.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i >= 14) ticks += std::stod(field);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

ServerUnderTest start_ctstore(const std::string& ctstore_path) {
  ServerUnderTest s;
  s.name = "ctstore";
  s.process = std::make_unique<test::ChildProcess>(
      std::vector<std::string>{ctstore_path, "--host", "127.0.0.1", "--port", "0"});
  auto port = s.process->wait_for_line(std::regex(R"(listening\D*?(?:[\d.]+|\[[0-9a-fA-F:]+\]|[\w.-]+):(\d+))"),
                                       std::chrono::seconds(20));
  if (!port) throw std::runtime_error("ctstore did not report its port:\n" + s.process->output());
  s.port = static_cast<std::uint16_t>(std::stoi(*port));
  return s;
}

ServerUnderTest start_floor(const std::string& store_bench_path) {
  ServerUnderTest s;
  s.name = "floor";
  s.process = std::make_unique<test::ChildProcess>(std::vector<std::string>{store_bench_path, "--serve-floor"});
  auto port = s.process->wait_for_line(std::regex(R"(floor listening on 127\.0\.0\.1:(\d+))"), std::chrono::seconds(20));
  if (!port) throw std::runtime_error("the floor server did not report its port:\n" + s.process->output());
  s.port = static_cast<std::uint16_t>(std::stoi(*port));
  return s;
}

namespace {
// torch_store_server.py takes a fixed port: ask the kernel for a free one. (It could be taken again before the
// server binds; the server would then fail to start and we report that.)
std::uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}
}  // namespace

ServerUnderTest start_torch_server(const std::string& python, const std::string& script) {
  ServerUnderTest s;
  s.name = "torch";
  s.port = free_port();
  s.process = std::make_unique<test::ChildProcess>(std::vector<std::string>{python, script, std::to_string(s.port)});
  if (!s.process->wait_for_line(std::regex("^ready"), std::chrono::seconds(60)))
    throw std::runtime_error("torch's TCPStore server did not start:\n" + s.process->output());
  return s;
}

}  // namespace ctrun::bench
