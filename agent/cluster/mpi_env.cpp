#include "agent/cluster/mpi_env.hpp"

namespace ctrun::agent::cluster {

std::optional<DerivedDefaults> derive_mpi(const EnvLookup& env, const GivenLookup& given, bool pmi) {
  std::string size_var = "OMPI_COMM_WORLD_SIZE", rank_var = "OMPI_COMM_WORLD_RANK", source = "Open MPI";
  auto size = env(size_var), rank = env(rank_var);
  if ((!size || !rank) && pmi) {
    size_var = "PMI_SIZE";
    rank_var = "PMI_RANK";
    source = "MPI (PMI)";
    size = env(size_var);
    rank = env(rank_var);
  }
  if (!size || !rank || size->empty() || rank->empty()) return std::nullopt;
  DerivedDefaults d;
  d.source = source + " rank " + *rank + " of " + *size;
  d.derive(given, "nnodes", *size, size_var);
  d.derive(given, "node_rank", *rank, rank_var);
  if (auto jobid = env("OMPI_MCA_ess_base_jobid"); jobid && !jobid->empty()) {
    d.derive(given, "rdzv_id", "mpi-" + *jobid, "OMPI_MCA_ess_base_jobid");
  }
  const bool endpoint_given = given("rdzv_endpoint").has_value();
  auto addr = env("MASTER_ADDR"), port = env("MASTER_PORT");
  if (!endpoint_given) {
    if (given("rdzv_backend").value_or("static") == "c10d") {
      if (addr && !addr->empty()) {
        d.derive(given, "rdzv_endpoint", *addr + (port && !port->empty() ? ":" + *port : ""),
                 "MASTER_ADDR" + std::string(port ? ":MASTER_PORT" : ""));
      }
    } else {
      if (addr && !addr->empty()) d.derive(given, "master_addr", *addr, "MASTER_ADDR");
      if (port && !port->empty()) d.derive(given, "master_port", *port, "MASTER_PORT");
    }
  }
  if (*size != "1" && !endpoint_given && !given("master_addr") && (!addr || addr->empty())) {
    d.notes.push_back("no MASTER_ADDR: node rank 0 is expected at --master-addr " +
                      given("master_addr").value_or("127.0.0.1") + " (on several hosts: mpirun -x MASTER_ADDR=<host>)");
  }
  return d;
}

}  // namespace ctrun::agent::cluster
