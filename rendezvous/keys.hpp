#pragma once
// The key layout of one run's rendezvous state in the store (docs/rendezvous.md). Every key is under
// "ctrun.rdzv.<run_id>/"; per-round keys under ".../r<round>/". Values are small: counters, one JSON record
// per node, one JSON assignment per node — so a round costs O(N) bytes in the number of nodes.

#include <cstdint>
#include <string>
#include <string_view>

namespace ctrun::rdzv {

class Keys {
 public:
  explicit Keys(const std::string& run_id) : base_("ctrun.rdzv." + run_id + "/") {}

  std::string closed() const { return base_ + "closed"; }  // exists once the run is closed (value: reason)
  std::string latest() const { return base_ + "latest"; }  // newest completed round (hint for newcomers)
  std::string lease() const { return base_ + "lease"; }    // etcd only: id of the lease every key of the run has

  // Per round r:
  std::string joined(std::uint64_t r) const { return round(r) + "joined"; }  // ADD counter: arrival index k
  std::string node(std::uint64_t r, std::int64_t k) const { return round(r) + "node/" + std::to_string(k); }
  std::string min_reached(std::uint64_t r) const { return round(r) + "min"; }  // set by the MIN-th arrival
  std::string decided(std::uint64_t r) const { return round(r) + "decided"; }  // CAS: who completes the round
  std::string done(std::uint64_t r) const { return round(r) + "done"; }        // value N: arrivals 1..N are in
  std::string assign(std::uint64_t r, std::int64_t k) const { return round(r) + "assign/" + std::to_string(k); }
  std::string member(std::uint64_t r, int rank) const { return round(r) + "member/" + std::to_string(rank); }
  // A member's beat counter: the round's completion writes kUnbeaten, each beat its number from 1.
  std::string heartbeat(std::uint64_t r, int rank) const { return round(r) + "hb/" + std::to_string(rank); }
  static constexpr std::string_view kUnbeaten = "0";
  std::string over(std::uint64_t r) const { return round(r) + "over"; }  // the round must end (value: reason)
  std::string exit(std::uint64_t r, int rank) const { return round(r) + "exit/" + std::to_string(rank); }
  std::string gone(std::uint64_t r) const { return round(r) + "gone"; }        // ADD: members that left or died
  std::string failure(std::uint64_t r) const { return round(r) + "failure"; }  // CAS: the node that failed first
  // ON_CLOSE log of the members' heartbeat connections: "-<rank>," on a close, "+<rank>," on a reconnect
  std::string lost(std::uint64_t r) const { return round(r) + "lost"; }
  // etcd only: bound to the member's own short lease (etcd/member_lease.hpp): gone when its agent is
  std::string alive(std::uint64_t r, int rank) const { return round(r) + "alive/" + std::to_string(rank); }
  std::string drained(std::uint64_t r) const { return round(r) + "drained"; }  // every member left or died
  std::string exit_count(std::uint64_t r) const { return round(r) + "exit_barrier"; }
  std::string exit_done(std::uint64_t r) const { return round(r) + "exit_barrier_done"; }
  std::string released(std::uint64_t r) const { return round(r) + "released"; }  // ADD: members done with the store
  std::string released_all(std::uint64_t r) const { return round(r) + "released_all"; }
  std::string round(std::uint64_t r) const { return base_ + "r" + std::to_string(r) + "/"; }

 private:
  std::string base_;
};

}  // namespace ctrun::rdzv
