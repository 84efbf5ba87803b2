#include "comm/cpu/transports.hpp"

#include <algorithm>
#include <optional>

#include "comm/transport/shm/transport.hpp"
#include "comm/transport/tcp/transport.hpp"
#include "common/log.hpp"

namespace ctrun::comm::cpu {

std::unique_ptr<transport::Transport> make_shm(const BackendContext& ctx, std::shared_ptr<store::Store> store, int rank,
                                               int size, std::vector<int> names) {
  transport::shm::Options o;
  o.timeout = ctx.options.timeout;
  o.ring_bytes = ctx.config.shm_ring_bytes;
  o.slot_bytes = ctx.config.shm_workspace_bytes;
  o.slots = ctx.config.shm_slots;
  o.cores = ctx.config.shm_cores;
  o.pipeline_bytes = ctx.config.shm_pipeline_bytes;
  o.peer_reads = ctx.config.shm_direct;
  o.stream_bytes = ctx.config.shm_stream_bytes;
  o.rank_names = std::move(names);
  return transport::shm::create(std::move(store), rank, size, o);
}

std::unique_ptr<transport::Transport> make_tcp(const BackendContext& ctx) {
  transport::tcp::Options o;
  o.timeout = ctx.options.timeout;
  o.advertise_host = ctx.config.ifaddr;
  o.route_to = ctx.config.worker.master_addr;
  o.buffer_bytes = ctx.config.tcp_buffer_bytes;
  o.lowat_bytes = ctx.config.tcp_lowat_bytes;
  return transport::tcp::create(ctx.store, ctx.rank, ctx.size, o);
}

namespace {

std::string own_identity(const BackendContext& ctx) {
  return ctx.config.host.empty() ? transport::shm::host_key() : ctx.config.host;
}

std::vector<std::string> wait_all(const BackendContext& ctx, const std::vector<std::string>& keys) {
  auto& store = *ctx.store;
  try {
    store.wait(keys, ctx.options.timeout);
  } catch (const store::TimeoutError& e) {
    throw TimeoutError(std::string("comm: not every rank joined the group in time: ") + e.what());
  }
  return store.multi_get(keys);
}

// The agent's layout applies to the group the agent's variables describe: the world (not a subgroup), with this
// rank's RANK and WORLD_SIZE, and every variable in range.
bool agent_layout_applies(const BackendContext& ctx) {
  const auto& w = ctx.config.worker;
  if (ctx.parent || !w.local_rank || !w.local_world_size || !w.group_rank || !w.group_world_size) return false;
  if (w.rank != std::to_string(ctx.rank) || w.world_size != std::to_string(ctx.size)) return false;
  return *w.local_rank < *w.local_world_size && *w.local_world_size <= ctx.size && *w.local_rank <= ctx.rank &&
         *w.group_rank < *w.group_world_size && *w.group_world_size <= ctx.size;
}

// From the agent's variables: the ranks of an agent are RANK - LOCAL_RANK onwards, LOCAL_WORLD_SIZE of them, on
// one host (the agent's children). Each agent's local rank 0 publishes its range and its host's identity, every
// rank reads GROUP_WORLD_SIZE records instead of WORLD_SIZE (one per host, not one per rank); agents on one host
// (same identity) still make one host, as the exchange would find. First writer wins (compare_set), so every rank
// reads the same records; when they do not tile the world (an agent run with --virtual-local-rank gives every
// worker LOCAL_RANK 0, so any of them may have published) the result is none, on every rank alike.
std::optional<std::vector<std::string>> identities_from_agents(const BackendContext& ctx) {
  const auto& w = ctx.config.worker;
  auto& store = *ctx.store;
  if (*w.local_rank == 0) {
    const std::string key = "host/agent/" + std::to_string(*w.group_rank);
    const std::string record =
        std::to_string(ctx.rank) + " " + std::to_string(*w.local_world_size) + " " + own_identity(ctx);
    // The winner sets its record again: PyTorch's TCPStore creates a key in compare_set without waking the
    // clients already waiting for it, a set wakes them; the value stays the one every rank reads.
    if (store.compare_set(key, "", record) == record) store.set(key, record);
  }
  std::vector<std::string> keys;
  for (int g = 0; g < *w.group_world_size; ++g) keys.push_back("host/agent/" + std::to_string(g));
  const auto records = wait_all(ctx, keys);
  std::vector<std::string> identities(static_cast<std::size_t>(ctx.size));
  std::vector<bool> seen(static_cast<std::size_t>(ctx.size), false);
  for (const auto& rec : records) {
    const auto sp1 = rec.find(' ');
    const auto sp2 = sp1 == std::string::npos ? sp1 : rec.find(' ', sp1 + 1);
    if (sp2 == std::string::npos) return std::nullopt;
    const int first = std::stoi(rec.substr(0, sp1));
    const int count = std::stoi(rec.substr(sp1 + 1, sp2 - sp1 - 1));
    if (first < 0 || count <= 0 || first + count > ctx.size) return std::nullopt;
    for (int r = first; r < first + count; ++r) {
      if (seen[static_cast<std::size_t>(r)]) return std::nullopt;
      seen[static_cast<std::size_t>(r)] = true;
      identities[static_cast<std::size_t>(r)] = rec.substr(sp2 + 1);
    }
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) return std::nullopt;
  return identities;
}

}  // namespace

std::vector<std::string> exchange_host_identities(const BackendContext& ctx) {
  if (agent_layout_applies(ctx)) {
    if (auto ids = identities_from_agents(ctx)) {
      log::get("comm")->debug("comm: rank {}: hosts from {} agents' records", ctx.rank,
                              *ctx.config.worker.group_world_size);
      return *ids;
    }
    log::get("comm")->debug("comm: the agents' host records do not tile the group; exchanging per rank");
  }
  // Groups torchrun or a user built, subgroups, and agents whose variables do not place every rank: every rank
  // publishes its own identity.
  auto& store = *ctx.store;
  store.set("host/" + std::to_string(ctx.rank), own_identity(ctx));
  std::vector<std::string> keys;
  for (int r = 0; r < ctx.size; ++r) keys.push_back("host/" + std::to_string(r));
  return wait_all(ctx, keys);
}

}  // namespace ctrun::comm::cpu
