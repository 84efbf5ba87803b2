#include "comm/nccl/unique_id_exchange.hpp"

namespace ctrun::comm::nccl {

std::string exchange_unique_id(store::Store& store, int rank, int size, Duration timeout,
                               const std::function<std::string()>& make_id) {
  const std::int64_t generation = store.add("nccl/comms/" + std::to_string(rank), 1);
  const std::string key = "nccl/uid/" + std::to_string(generation);
  if (rank == 0) {
    std::string id = make_id();
    if (size > 1) store.set(key, id);
    return id;
  }
  try {
    store.wait({key}, timeout);
  } catch (const store::TimeoutError&) {
    throw TimeoutError("nccl: rank " + std::to_string(rank) + " waited " + std::to_string(timeout.count()) +
                       " ms for rank 0 to publish the NCCL unique id (store key '" + key +
                       "'); is rank 0 alive, using backend 'nccl' and creating the same groups in the same order?");
  }
  std::string id = store.get(key);
  // Every non-zero rank reads once; the last one removes the id so the store does not grow per communicator.
  if (store.add(key + "/read", 1) == size - 1) {
    store.delete_key(key);
    store.delete_key(key + "/read");
  }
  return id;
}

}  // namespace ctrun::comm::nccl
