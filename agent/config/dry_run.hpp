#pragma once
// --dry-run: the resolved configuration and every local worker's command and environment, printed; nothing is
// started, bound or connected. Values only a rendezvous can decide (group rank, world size and MASTER_ADDR/PORT of
// a multi-node round, an ephemeral store port) are shown for this node being group rank --node-rank of --nnodes'
// minimum, and named as such.

#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

std::string dry_run_report(const LaunchConfig& config, const EnvLookup& env);

}  // namespace ctrun::agent
