#pragma once
// A share of the workers' init storm (scenarios/init_storm.cpp), living in one process: simulated ranks, each a
// non-blocking client doing what torch 2.x's init_process_group does to the job's store (VALIDATE and PING, ADD
// 'init/', a shared key's WAIT then GET as NCCL's unique-id exchange, the store-based barrier: ADD 1, ADD 0, the last
// SETs '<key>/last_worker', WAIT for it), over one epoll loop. Either every rank connects to the store itself
// (direct), or each simulated node runs the agent's store relay (store/relay.hpp, all of the process's relays on one
// io_context) and its ranks connect to it on loopback (relay): the store then holds one connection per node.
//
// The bench drives a group over its stdin/stdout, one line each way:
//   ready <ranks>                 once the relays (if any) hold their upstream connection (or: error <message>)
//   go    -> joined <result>      every rank runs the init; the result as JoinResult (ops: requests sent)
//   quit  -> bye                  every connection closes, the process exits

namespace ctrun::scale_bench {

// `scale_bench --storm-group MODE PORT FIRST_NODE NODES RANKS WORLD_NODES` (MODE relay or direct).
int storm_group_main(int argc, char** argv);

}  // namespace ctrun::scale_bench
