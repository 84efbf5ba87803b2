#include "agent/cluster/kubeflow_env.hpp"

namespace ctrun::agent::cluster {
namespace {

std::optional<std::string> set(const EnvLookup& env, const std::string& name) {
  auto v = env(name);
  if (!v || v->empty()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<DerivedDefaults> derive_kubeflow(const EnvLookup& env, const GivenLookup& given) {
  if (!set(env, "PET_NNODES") && !set(env, "PET_MASTER_ADDR") && !set(env, "PET_RDZV_ENDPOINT")) return std::nullopt;
  DerivedDefaults d;
  d.source = "Kubeflow";
  if (auto rank = set(env, "RANK")) d.derive(given, "node_rank", *rank, "RANK, the pod's node rank");
  if (auto addr = set(env, "MASTER_ADDR")) d.derive(given, "master_addr", *addr, "MASTER_ADDR");
  if (auto port = set(env, "MASTER_PORT")) d.derive(given, "master_port", *port, "MASTER_PORT");

  std::string nnodes = given("nnodes").value_or("1");
  auto colon = nnodes.find(':');
  const bool elastic = colon != std::string::npos && nnodes.substr(0, colon) != nnodes.substr(colon + 1);
  std::string backend = given("rdzv_backend").value_or("static");
  if (elastic && !given("rdzv_backend")) {
    d.derive(given, "rdzv_backend", "c10d", "PET_NNODES=" + nnodes + " is elastic");
    backend = "c10d";
  }
  if (backend == "c10d" && !given("rdzv_endpoint")) {
    auto addr = given("master_addr");
    std::string addr_from = "PET_MASTER_ADDR";
    if (!addr) {
      addr = set(env, "MASTER_ADDR");
      addr_from = "MASTER_ADDR";
    }
    auto port = given("master_port");
    std::string port_from = "PET_MASTER_PORT";
    if (!port) {
      port = set(env, "MASTER_PORT");
      port_from = "MASTER_PORT";
    }
    if (addr) {
      d.derive(given, "rdzv_endpoint", *addr + (port ? ":" + *port : ""), addr_from + (port ? ":" + port_from : ""));
    }
  }
  return d;
}

}  // namespace ctrun::agent::cluster
