#include "agent/config/launch_config_builder.hpp"

#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "agent/config/flag_rules.hpp"
#include "agent/config/flags.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "rendezvous/etcd/etcd_options.hpp"

namespace ctrun::agent {
namespace {

// As torchrun: explicit rendezvous settings are replaced by a local one with a fresh run id and a free port.
void apply_standalone(LaunchConfig& c) {
  c.rdzv.backend = rdzv::Backend::kC10d;
  c.rdzv.endpoint = "localhost:0";
  c.rdzv.id = random_run_id();
  c.rdzv.min_nodes = c.rdzv.max_nodes = 1;
  c.rdzv.master_port.reset();
}

// The rendezvous library's own checks (--rdzv-conf values, the endpoint), run before anything is opened.
void validate_rendezvous(const LaunchConfig& c) {
  try {
    rdzv::RendezvousParameters p = rendezvous_parameters(c);
    if (c.rdzv.backend == rdzv::Backend::kEtcd) {
      rdzv::etcd::parse_options(p);  // every endpoint, protocol, TLS files, lease_ttl
      rdzv::c10d_settings(p);        // the same timeouts as c10d
    } else if (!c.rdzv.endpoint.empty()) {
      rdzv::parse_endpoint(c.rdzv.endpoint,
                           c.rdzv.backend == rdzv::Backend::kC10d ? rdzv::kDefaultC10dPort : rdzv::kDefaultMasterPort);
    }
    if (c.rdzv.backend == rdzv::Backend::kC10d) rdzv::c10d_settings(p);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

std::string random_run_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> byte(0, 255);
  unsigned char b[16];
  for (auto& x : b) x = static_cast<unsigned char>(byte(rd));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // variant 1
  char out[37];
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

LaunchConfig build_launch_config(const FlagSources& sources) {
  LaunchConfig c;  // the table's defaults
  for (const auto& flag : flag_table()) {
    if (flag.bind == nullptr) continue;
    if (auto value = sources.resolve(flag)) FlagSources::apply(flag, *value, c);
  }
  if (c.rdzv.standalone) apply_standalone(c);
  check_flag_rules(c);
  validate_rendezvous(c);
  c.script = sources.command_line().script;
  c.script_args = sources.command_line().script_args;
  // torchrun's runpy.run_path needs an absolute path; make it one rather than fail.
  if (c.workers.run_path) c.script = std::filesystem::absolute(c.script).string();
  return c;
}

}  // namespace ctrun::agent
