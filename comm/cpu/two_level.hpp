#pragma once
// The cpu backend's two-level groups (algorithms/two_level.hpp): this host's shm transport and messenger beside
// the group's tcp messenger, the host layout, each level's link costs (between hosts: settings, else timed by
// link_probe.hpp), and the choice of each level's algorithm (the size table inside a host, the cost model between
// hosts, CTRUN_COMM_ALGO over both: algorithms::Selector). Ops run through algorithms::two_level_table().

#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/selection.hpp"
#include "comm/algorithms/two_level.hpp"
#include "comm/backend.hpp"
#include "comm/transport/messenger.hpp"

namespace ctrun::comm::cpu {

class TwoLevel {
 public:
  // Creates this host's shm transport (when the host has more than one of the group's ranks) and prices the
  // link between hosts (settings, else probe_link). Runs before the backend's worker starts: the only user of
  // `global` then.
  TwoLevel(const BackendContext& ctx, algorithms::HostLayout layout, transport::Messenger& global,
           const algorithms::Selector& selector, std::size_t global_chunk_bytes);
  ~TwoLevel();

  // Whether `op` runs in two levels (else it runs flat over the group's tcp messenger).
  static bool handles(algorithms::OpKind op);
  // Runs one op of two_level_table(); `name` receives the algorithms chosen ("two levels: shm in hosts,
  // double_binary_tree between") for error messages.
  void run(algorithms::OpKind op, const algorithms::OpArgs& args, std::uint64_t tag,
           transport::Clock::time_point deadline, std::string* name);
  // The cross level's choice for an op of `bytes` per rank.
  algorithms::Algorithm cross_choice(algorithms::OpKind op, std::size_t bytes) const;

  void abort(const std::string& reason, std::exception_ptr error);
  void close(std::exception_ptr error);
  // "2 hosts x 1-3 ranks, net 52 us 1100 MB/s (measured)"
  std::string describe() const;
  // This host's rank numbering, for errors raised inside the host: "host 1: local ranks 0..2 = group ranks 3 5 6".
  std::string local_ranks_text() const;
  const algorithms::LinkCost& net() const { return net_; }

 private:
  class OpLevels;

  algorithms::HostLayout layout_;
  int rank_;
  transport::Messenger& global_;
  const algorithms::Selector& selector_;
  std::size_t global_chunk_bytes_;
  std::size_t local_chunk_bytes_;
  std::unique_ptr<transport::Transport> local_transport_;
  std::unique_ptr<transport::Messenger> local_messenger_;
  algorithms::Needs local_available_ = algorithms::Needs::kAnyTransport;
  std::vector<int> self_;  // {rank_}: the local level of a host with one rank
  algorithms::Scratch local_scratch_;
  algorithms::Scratch cross_scratch_;
  algorithms::Scratch pack_scratch_;
  algorithms::LinkCost net_;
  algorithms::LinkCost local_;
  bool measured_ = false;
};

}  // namespace ctrun::comm::cpu
