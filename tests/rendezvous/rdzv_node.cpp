// rdzv_node: a minimal agent loop over the real rendezvous (create_handler, TCP store) for the multi-process tests:
// rendezvous, report the round on stdout, poll num_nodes_waiting()/round_broken() as the agent's monitor loop
// does, re-rendezvous when told; on stdin EOF run the exit barrier and shut down (close the run).
//   rdzv_node ENDPOINT RUN_ID NNODES LOCAL_ADDR RDZV_CONF
// Prints "ROUND <round> <group_rank> <group_world_size>" and "RESTART <reason>"; exits 0, or 1 with "ERROR <what>".
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "rendezvous/factory.hpp"

using namespace ctrun::rdzv;

namespace {

bool stdin_closed() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::read(STDIN_FILENO, &c, 1) <= 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: rdzv_node ENDPOINT RUN_ID NNODES LOCAL_ADDR RDZV_CONF\n");
    return 2;
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // never outlive a test
  try {
    RendezvousParameters p;
    p.backend = "c10d";
    p.endpoint = argv[1];
    p.run_id = argv[2];
    p.local_addr = argv[4];
    std::tie(p.min_nodes, p.max_nodes) = parse_nnodes(argv[3]);
    p.config = parse_rdzv_conf(argv[5]);
    auto h = create_handler(p, NodeSpec{argv[4], 1, "default"});
    h->set_worker_store_address(argv[4], 1234);
    for (;;) {
      auto info = h->next_rendezvous();
      std::printf("ROUND %llu %d %d\n", static_cast<unsigned long long>(info.round), info.group_rank,
                  info.group_world_size);
      std::fflush(stdout);
      for (;;) {
        if (std::chrono::steady_clock::now() > give_up) return 3;
        if (stdin_closed()) {
          h->exit_barrier(std::chrono::seconds(10));
          h->shutdown();
          return 0;
        }
        if (h->num_nodes_waiting() > 0 || h->round_broken()) {
          std::printf("RESTART %s\n", h->restart_reason().c_str());
          std::fflush(stdout);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the agent's monitor interval
      }
    }
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
}
