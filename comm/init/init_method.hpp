#pragma once
// Turns an init_method URL (env://, tcp://host:port, file:///path) plus rank/world size into the store a
// process group rendezvouses on, as torch.distributed's rendezvous handlers do.

#include <memory>
#include <string>

#include "comm/config.hpp"
#include "comm/types.hpp"
#include "store/store.hpp"

namespace ctrun::comm::init {

struct Rendezvous {
  std::shared_ptr<store::Store> store;  // keys of the group go under `prefix`
  std::string prefix;
  int rank = -1;
  int world_size = -1;
  std::shared_ptr<void> keepalive;  // a store server rank 0 hosts, if any
};

// rank / world_size -1: from the worker environment `env` (env://, which also takes the store's address and the
// agent store's attempt from it) or the URL query (?rank=&world_size=).
// Throws InvalidArgumentError with what is missing or malformed.
Rendezvous rendezvous(const std::string& init_method, int rank, int world_size, Duration timeout,
                      const WorkerEnvironment& env);

}  // namespace ctrun::comm::init
