#pragma once
// The "cpu" backend: collectives over host memory with the tcp or shm transport (chosen per group: shm when
// every rank shares this host's IPC and mount namespaces, tcp when no two ranks do, else two levels: shm inside
// each host and tcp between, two_level.hpp; ProcessGroupOptions::transport / CTRUN_COMM_TRANSPORT force one). Ops run
// in issue order on one worker thread per group, like gloo's ProcessGroupGloo; p2p ops only post their messages there,
// so an isend/irecv never blocks the ops behind it.

#include <memory>

#include "comm/backend.hpp"

namespace ctrun::comm::cpu {

std::unique_ptr<Backend> make_cpu_backend(BackendContext context);

}  // namespace ctrun::comm::cpu
