#pragma once
// A share of scale_bench's simulated nodes, living in one process: each node is the agent's real rendezvous code, a
// C10dHandler with its one store connection (a MuxStore). The process's nodes share one I/O thread (ClientLoop) and
// one Runner of a few threads, so that thousands of nodes need neither thousands of threads nor more descriptors
// than one connection each. Everything that is not the measured work happens before it: the handlers connect first.
//
// The bench drives a group over its stdin/stdout (agent_group_main), one line each way:
//   ready <nodes>                       once every handler is connected   (or: error <message>, then exit 1)
//   join        -> joined <result>      every node calls next_rendezvous(); <result> when all hold a round
//   follow      -> joined <result>      every node whose round breaks (a member died) joins the next round
//   checkpoint R -> joined <result>     every node runs the agent's checkpoint exchange of attempt R on its round's
//                                       store (agent/checkpoint/exchange.hpp), each on a thread (it blocks)
//   status R     -> joined <result>     every node but group rank 0 publishes its first live-view record of attempt
//                                       R (agent/status/node_records.hpp: the record and the index entry)
//   status-read R -> joined <result>    group rank 0 (where it lives) reads the published records once
//   quit        -> bye                  every node closes the run (shutdown) and the process exits

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/c10d_handler.hpp"

namespace ctrun::scale_bench {

// When a group's nodes started and ended a join (steady_clock ns: comparable across processes), and how it went.
struct JoinResult {
  std::int64_t first_start_ns = 0;
  std::int64_t first_end_ns = 0;  // the first node holding its round: about when the round was published
  std::int64_t last_end_ns = 0;
  std::uint64_t nodes = 0;
  std::uint64_t failures = 0;
  std::uint64_t ops = 0, bytes = 0;  // exchanges: the store calls made and their payload bytes (CountingStore)
  std::int64_t rank0_ns = 0;         // exchanges: how long group rank 0's took (0: not in this group)
  std::string error;                 // the first failure's message

  void merge(const JoinResult& o);
  std::string encode() const;  // one line
  static JoinResult decode(const std::string& line);
};

struct GroupSpec {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  int first = 0;  // nodes first .. first+count-1 live here (their addresses are node<i>)
  int count = 0;
  int threads = 8;  // the group's Runner
};

class AgentGroup {
 public:
  using Connect = std::function<std::shared_ptr<store::Store>()>;
  // Connects every node (throws the first connection error).
  AgentGroup(const GroupSpec& spec, const Connect& connect, const std::string& backend = "c10d");
  ~AgentGroup();

  JoinResult join();    // every node: next_rendezvous
  JoinResult follow();  // every node whose round breaks: next_rendezvous, until each holds a new round
  void shutdown();      // every node closes the run
  JoinResult checkpoint(int restart_count);
  JoinResult status(int restart_count, bool read);

 private:
  struct Joins;
  void start(Joins& joins, int node);
  JoinResult finish(Joins& joins);

  GroupSpec spec_;
  std::shared_ptr<rdzv::Runner> runner_;
  std::vector<std::unique_ptr<rdzv::C10dHandler>> handlers_;
  std::vector<rdzv::RoundInfo> rounds_;  // the round each node holds
  // Runs work(node) for every node at once, each on a thread of its own (the exchanges block), and merges.
  JoinResult each_node(const std::function<void(int node, JoinResult& mine)>& work);
};

std::int64_t now_ns();

// `scale_bench --agent-group PORT RUN_ID MIN MAX FIRST COUNT THREADS`: the process side of the protocol above.
int agent_group_main(int argc, char** argv);

}  // namespace ctrun::scale_bench
