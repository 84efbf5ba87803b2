#pragma once
// How the ranks of a group agree on an NCCL unique id (or any bootstrap blob) through the group's store.
// CUDA-free so it is unit-tested without a GPU.
//
// Freshness: the store given to a backend is already scoped to the group and the restart attempt. Within it each
// rank counts the communicators it has created ("nccl/comms/<rank>", an atomic add), so the n-th communicator of
// every rank uses key "nccl/uid/<n>": a group re-created on the same prefix in one process, or a second
// communicator of one group, never reads an earlier id. The last reader deletes the key.

#include <functional>
#include <string>

#include "comm/types.hpp"
#include "store/store.hpp"

namespace ctrun::comm::nccl {

// Rank 0 calls make_id() and publishes the result; every rank returns it. Throws TimeoutError when rank 0 does
// not publish within `timeout` (rank 0 died, or uses another backend or group order).
std::string exchange_unique_id(store::Store& store, int rank, int size, Duration timeout,
                               const std::function<std::string()>& make_id);

}  // namespace ctrun::comm::nccl
