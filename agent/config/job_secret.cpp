#include "agent/config/job_secret.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "agent/base/command_line.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "agent/launch/store_relay.hpp"
#include "common/auth/crypto.hpp"
#include "common/auth/secret.hpp"
#include "common/log.hpp"

namespace ctrun::agent {
namespace {

constexpr const char* kConfKey = "secret_file";

std::shared_ptr<const auth::Secret> from_sources(const LaunchConfig& config, const EnvLookup& env) {
  if (config.secret_file == "-")
    return std::make_shared<auth::Secret>(read_secret_line(STDIN_FILENO, 10.0), "--secret-file - (stdin)");
  std::string file = config.secret_file;
  if (file.empty()) {
    if (auto it = config.rdzv.conf.find(kConfKey); it != config.rdzv.conf.end()) file = it->second;
  }
  if (!file.empty()) {
    if (const std::string warning = auth::secret_file_warning(file); !warning.empty())
      log::get("agent")->warn("{}", warning);
  }
  const auto text = env(auth::kSecretVariable);
  return auth::secret_from(file, text ? text->c_str() : nullptr);
}

}  // namespace

std::string read_secret_line(int fd, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string line;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) throw UsageError("--secret-file -: no line on stdin within " + std::to_string(timeout_s) + " s");
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char c = 0;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (line.empty()) throw UsageError("--secret-file -: stdin ended before the secret");
      return line;
    }
    if (c == '\n') return line;
    line += c;
    if (line.size() > 4096) throw UsageError("--secret-file -: the first line of stdin is longer than 4 KiB");
  }
}

void resolve_job_secret(LaunchConfig& config, const EnvLookup& env) {
  try {
    config.secret = from_sources(config, env);
    if (config.secret) auth::load_crypto();
  } catch (const UsageError&) {
    ::unsetenv(auth::kSecretVariable);
    throw;
  } catch (const std::exception& e) {
    ::unsetenv(auth::kSecretVariable);
    throw UsageError(e.what());
  }
  ::unsetenv(auth::kSecretVariable);
}

std::shared_ptr<const auth::Secret> launcher_secret(LaunchConfig& config, const EnvLookup& env) {
  resolve_job_secret(config, env);
  if (config.secret) return config.secret;
  return std::make_shared<auth::Secret>(auth::Secret::generate("the --hostfile launcher"));
}

std::string open_doors_warning(const LaunchConfig& config) {
  if (is_single_node(config)) return "";
  if (config.secret) {
    if (workers_store_needs_secret(config)) return "";
    return std::string(
               "the workers' store (MASTER_ADDR:MASTER_PORT) stays open to anyone who can reach it, as "
               "torch's: its clients are the workers themselves (") +
           (config.rdzv.backend == rdzv::Backend::kStatic ? "--rdzv-backend static" : "--store-relay off") +
           "), and torch's TCPStore has no handshake. With c10d or etcd and --store-relay on (the default), each "
           "node's relay proves the secret and the store takes nothing else (docs/security.md)";
  }
  std::string doors;
  if (config.rdzv.backend == rdzv::Backend::kC10d) doors += "the rendezvous store (--rdzv-endpoint), ";
  doors += "the workers' store";
  if (!config.checkpoint.memory || *config.checkpoint.memory > 0)
    doors += ", each agent's checkpoint replication endpoint (your model's weights)";
  return "this multi-node job has no secret: anyone who can reach this node's ports can use " + doors +
         " as a member of the job. Close them by giving every agent the same secret: --secret-file FILE (`head -c 32 "
         "/dev/urandom | base64 > FILE; chmod 600 FILE`) or CTRUN_SECRET (docs/security.md); --hostfile/--hosts "
         "make one per job";
}

}  // namespace ctrun::agent
