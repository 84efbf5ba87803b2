#pragma once
// The join state machine of the c10d backend, written once and driven step by step: step(now) performs only
// non-blocking store operations (its first reads, and whether the run is closed, in one round trip: Store::peek)
// and returns either the round this node holds or the one key to wait for (and until when). The handler blocks on that
// key with a store WAIT; tests drive several JoinOps over one MemoryStore with a fake clock, in any interleaving,
// without sleeping. Protocol: docs/rendezvous.md.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "rendezvous/clock.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/records.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv {

struct JoinConfig {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  store::Duration join_timeout = std::chrono::seconds(600);
  store::Duration last_call_timeout = std::chrono::seconds(30);
};

struct JoinResult {
  std::uint64_t round = 0;
  std::int64_t arrival = 0;
  Assignment assignment;
};

// Block until `key` exists or `until` (TimePoint::max(): no deadline), then call step() again.
struct JoinWait {
  std::string key;
  TimePoint until;
};

class JoinOp {
 public:
  JoinOp(store::Store& store, JoinConfig config, NodeRecord me, std::optional<Membership> previous);

  // Throws RendezvousClosedError, RendezvousTimeoutError; store errors pass through.
  std::variant<JoinResult, JoinWait> step(TimePoint now);
  // The key of the last JoinWait exists (its WAIT came back ready): the next step need not read it, nor whether the
  // run closed (a wait slice's step does); a step with nothing else to read asks the store nothing.
  void woken(const std::string& key) { woken_ = key; }

  std::uint64_t round() const { return round_; }
  std::int64_t arrival() const { return arrival_; }  // 0 until this node arrived in round()

 private:
  enum class Phase { kStart, kArrive, kGate, kCount, kDecided };
  using Step = std::optional<std::variant<JoinResult, JoinWait>>;  // nullopt: go on with the next phase

  Step start(TimePoint now);
  Step arrive();
  Step gate(TimePoint now);
  Step count(TimePoint now);
  Step decided(TimePoint now);
  Step try_decide(std::int64_t members);
  Step on_join_deadline(TimePoint now);
  void complete(std::int64_t members);
  void abort_round(const std::string& message);
  [[noreturn]] void throw_gate_timeout(TimePoint now, std::int64_t members);
  std::vector<std::string> first_reads() const;
  std::optional<std::string> read(const std::string& key);  // nullopt: missing
  bool exists(const std::string& key);
  std::int64_t read_int(const std::string& key);                 // a key that exists
  std::optional<std::int64_t> peek_int(const std::string& key);  // nullopt: missing
  bool member_of(std::uint64_t round) const { return previous_ && previous_->round == round; }
  Step drain(std::uint64_t prev, TimePoint now);
  bool settle_lost(std::uint64_t prev);  // true: it declared a member dead
  TimePoint deadline() const { return spare_ ? TimePoint::max() : deadline_; }

  store::Store& store_;
  JoinConfig config_;
  Keys keys_;
  NodeRecord me_;
  std::optional<Membership> previous_;
  Phase phase_ = Phase::kStart;
  std::uint64_t round_ = 0;
  std::int64_t arrival_ = 0;
  TimePoint started_{};
  TimePoint deadline_{};
  std::optional<std::int64_t> done_;    // done(round_) as last read: the round's member count (0: aborted)
  bool counted_ = false;                // count() ran since this node arrived in round_
  std::optional<TimePoint> last_call_;  // when this node may complete the round with fewer than MAX
  bool spare_ = false;                  // waiting behind a full round: no join timeout (as torchrun)
  bool deadline_passed_ = false;        // our join deadline passed, but another node decided the round first
  std::string timeout_message_;
  std::map<std::string, std::optional<std::string>> prefetched_;  // this step's first reads (step())
  std::string woken_;                         // the key whose wait came back ready before this step (woken())
  bool drain_waited_ = false;                 // this node waited once already for the previous round to drain
  std::optional<std::int64_t> prev_members_;  // done(previous round) as read at the start (-1: missing)
};

}  // namespace ctrun::rdzv
