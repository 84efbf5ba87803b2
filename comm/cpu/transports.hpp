#pragma once
// The cpu backend's transports, made from a group's settings: shm among ranks that share a host, tcp between
// any ranks, and which of them a group (or each level of a two-level group) uses.

#include <memory>
#include <string>
#include <vector>

#include "comm/backend.hpp"
#include "comm/transport/transport.hpp"

namespace ctrun::comm::cpu {

// The group's shm transport over `size` ranks (this one is `rank`) keyed in `store`; errors name rank r as
// names[r] (empty: r).
std::unique_ptr<transport::Transport> make_shm(const BackendContext& ctx, std::shared_ptr<store::Store> store, int rank,
                                               int size, std::vector<int> names = {});
// The group's tcp transport over all of its ranks.
std::unique_ptr<transport::Transport> make_tcp(const BackendContext& ctx);

// Every rank's host identity (CTRUN_COMM_HOST, else the shm transport's host key), exchanged through the store:
// one record per agent when the group is the world an agent launched (LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// GROUP_WORLD_SIZE in Config::worker), else one per rank.
std::vector<std::string> exchange_host_identities(const BackendContext& ctx);

}  // namespace ctrun::comm::cpu
