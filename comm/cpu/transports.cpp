#include "comm/cpu/transports.hpp"

#include "comm/transport/shm/transport.hpp"
#include "comm/transport/tcp/transport.hpp"

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

std::vector<std::string> exchange_host_identities(const BackendContext& ctx) {
  auto& store = *ctx.store;
  store.set("host/" + std::to_string(ctx.rank), ctx.config.host.empty() ? transport::shm::host_key() : ctx.config.host);
  std::vector<std::string> keys;
  for (int r = 0; r < ctx.size; ++r) keys.push_back("host/" + std::to_string(r));
  try {
    store.wait(keys, ctx.options.timeout);
  } catch (const store::TimeoutError& e) {
    throw TimeoutError(std::string("comm: not every rank joined the group in time: ") + e.what());
  }
  return store.multi_get(keys);
}

}  // namespace ctrun::comm::cpu
