#pragma once
// How a round ends, shared by the join op (a member re-rendezvous), the liveness monitor (a member died) and the
// handler (a member leaves on a signal). Every path writes the same keys in the same order, so the next round's
// gate ("every member of the previous round left or died") needs no polling: it waits on one key.
//
//   over(r)      CAS "" -> "<kind>: <reason>"   first reason wins; members poll it with one CHECK
//   exit(r,rank) CAS "" -> "left" | "dead"      exactly one exit per member, whoever notices first
//   gone(r)      ADD 1 by the CAS winner         the member that makes it N sets drained(r)

#include <cstdint>
#include <string>
#include <string_view>

#include "rendezvous/keys.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv {

// The round a node held before calling next_rendezvous again (it leaves that round first).
struct Membership {
  std::uint64_t round = 0;
  int rank = 0;
  int members = 0;
  bool over_known = false;  // its over key was seen set (the handler's watch fired): leaving need not set it
};

// Kinds of over(r) reasons. "join"/"rejoin" are membership changes (num_nodes_waiting() > 0); the others break
// the round (round_broken()).
inline constexpr std::string_view kOverJoin = "join";               // a new node waits to join
inline constexpr std::string_view kOverRejoin = "rejoin";           // a member re-rendezvous (its workers restarted)
inline constexpr std::string_view kOverDead = "dead";               // a member's heartbeats stopped
inline constexpr std::string_view kOverLeave = "leave";             // a member left (signal)
inline constexpr std::string_view kOverSteppedOut = "stepped_out";  // a member kept failing and stepped out
inline constexpr std::string_view kOverClosed = "closed";           // the run was closed
inline constexpr std::string_view kOverAborted = "aborted";

// Sets over(r) unless already set. Returns the reason it holds afterwards.
std::string mark_over(store::Store& store, const Keys& keys, std::uint64_t round, std::string_view kind,
                      std::string_view reason);

// Records that member `rank` of round `round` (of `members` nodes) left or died; also marks the round over, unless
// `over_known` (its over key was seen set: one request less per member when a whole round rejoins).
// Returns true if this call recorded the exit (false: it was recorded before).
bool mark_exit(store::Store& store, const Keys& keys, std::uint64_t round, int rank, int members, std::string_view how,
               std::string_view kind, std::string_view reason, bool over_known = false);

// The kind part of an over(r) value ("dead: node ..." -> "dead").
std::string_view over_kind(std::string_view over_value);

}  // namespace ctrun::rdzv
