#include "rendezvous/membership.hpp"

#include <unistd.h>

#include <atomic>
#include <random>

#include <fmt/format.h>

namespace ctrun::rdzv {
namespace {

// Two observers may record the same exit at once (two monitors seeing one dead node): the CAS must tell them
// apart, so each write carries a token unique across processes and calls.
std::string unique_token() {
  static const std::uint64_t process_salt = std::random_device{}();
  static std::atomic<std::uint64_t> counter{0};
  return fmt::format("{}.{:x}.{}", ::getpid(), process_salt, counter++);
}

}  // namespace

std::string mark_over(store::Store& store, const Keys& keys, std::uint64_t round, std::string_view kind,
                      std::string_view reason) {
  return store.compare_set(keys.over(round), "", fmt::format("{}: {}", kind, reason));
}

bool mark_exit(store::Store& store, const Keys& keys, std::uint64_t round, int rank, int members, std::string_view how,
               std::string_view kind, std::string_view reason, bool over_known) {
  // over before drained: whoever waits on drained(r) may rely on over(r) being set too.
  if (!over_known) mark_over(store, keys, round, kind, reason);
  auto value = fmt::format("{} {}", how, unique_token());
  if (store.compare_set(keys.exit(round, rank), "", value) != value) return false;
  if (store.add(keys.gone(round), 1) == members) store.set(keys.drained(round), "1");
  return true;
}

std::string_view over_kind(std::string_view v) { return v.substr(0, v.find(':')); }

}  // namespace ctrun::rdzv
