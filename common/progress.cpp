#include "common/progress.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "common/log.hpp"
#include "common/worker_env.hpp"
#include "common/text.hpp"

namespace ctrun::progress {
namespace {

// A non-negative integer variable of the worker environment (LOCAL_RANK, RANK); -1 when unset or malformed.
int env_int(const char* name) {
  const auto v = worker_env::get(name);
  if (!v) return -1;
  const auto n = text::parse_int<int>(*v);
  return n && *n >= 0 ? *n : -1;
}

struct Attached {
  RegionHeader* header = nullptr;
  Row* row = nullptr;
};

// Maps `path` read-write and checks its header; null (with the reason in *why) when it is not a usable region.
RegionHeader* map_region(const std::string& path, int local_rank, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *why = std::string("cannot open it: ") + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(RegionHeader)) {
    ::close(fd);
    *why = "it is too small to hold a header";
    return nullptr;
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    *why = std::string("mmap failed: ") + std::strerror(errno);
    return nullptr;
  }
  auto* h = static_cast<RegionHeader*>(p);
  const bool layout_ok = h->magic == kMagic && h->version == kVersion && h->header_bytes == sizeof(RegionHeader) &&
                         h->row_bytes == sizeof(Row) && h->max_groups == static_cast<std::uint32_t>(kMaxGroups);
  if (!layout_ok || region_bytes(static_cast<int>(h->local_ranks)) > static_cast<std::size_t>(st.st_size) ||
      local_rank < 0 || static_cast<std::uint32_t>(local_rank) >= h->local_ranks) {
    *why = !layout_ok ? "its layout is of another ctrun version (records off)"
                      : "LOCAL_RANK " + std::to_string(local_rank) + " is outside its " +
                            std::to_string(h->local_ranks) + " rows";
    ::munmap(p, static_cast<std::size_t>(st.st_size));
    return nullptr;
  }
  return h;
}

Attached& attached() {
  static Attached a = [] {
    Attached out;
    const auto path = worker_env::get(worker_env::kProgressFile);
    if (!path) return out;
    const int local_rank = env_int(worker_env::kLocalRank);
    std::string why;
    out.header = map_region(*path, local_rank, &why);
    if (!out.header) {
      log::get("comm")->warn("progress records off: {}={}: {}", worker_env::kProgressFile, *path, why);
      return out;
    }
    out.row = row_of(out.header, local_rank);
    return out;
  }();
  return a;
}

std::mutex& claim_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

RegionHeader* create_region(const std::string& path, int local_ranks, int agent_pid, int attempt) {
  if (local_ranks < 1 || local_ranks > kMaxLocalRanks) {
    throw std::runtime_error("progress region: " + std::to_string(local_ranks) + " local ranks");
  }
  const std::size_t bytes = region_bytes(local_ranks);
  const auto fail = [&](const char* what) -> std::runtime_error {
    const int e = errno;
    ::unlink(path.c_str());
    return std::runtime_error(std::string("progress records: cannot ") + what + " " + path + ": " + std::strerror(e) +
                              " (hang detection needs a few KiB of /dev/shm per node)");
  };
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw fail("create");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    throw fail("size");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw fail("map");
  // ftruncate gave zeroed pages, which is every slot's free state; the header is filled in place.
  auto* h = static_cast<RegionHeader*>(p);
  h->version = kVersion;
  h->header_bytes = sizeof(RegionHeader);
  h->row_bytes = sizeof(Row);
  h->local_ranks = static_cast<std::uint32_t>(local_ranks);
  h->max_groups = kMaxGroups;
  h->agent_pid = agent_pid;
  h->attempt = static_cast<std::uint32_t>(attempt);
  h->created_ns = now_ns();
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;  // last: a worker that maps a half-made region refuses it
  return h;
}

void unmap_region(RegionHeader* h) {
  if (h) ::munmap(h, region_bytes(static_cast<int>(h->local_ranks)));
}

std::string region_path(int agent_pid, int attempt) {
  return "/dev/shm/" + std::string(kRegionPrefix) + std::to_string(agent_pid) + "-" + std::to_string(attempt);
}

RegionHeader* attached_region() { return attached().header; }

SlotWriter claim_slot(std::uint64_t group_id, int group_rank, int group_size) {
  Attached& a = attached();
  if (!a.row || group_id == 0) return {};
  std::lock_guard lock(claim_mutex());  // threads of this process; other processes are kept off by the pid CAS
  const int pid = static_cast<int>(::getpid());
  RowHeader& rh = a.row->header;
  rh.pid.store(pid, std::memory_order_relaxed);
  const int ordinal = static_cast<int>(rh.groups.fetch_add(1, std::memory_order_relaxed));
  for (Slot& s : a.row->slots) {
    std::int32_t free = 0;
    if (!s.identity.pid.compare_exchange_strong(free, pid, std::memory_order_acq_rel)) continue;
    // A fresh group: its issue, run and p2p parts start from zero (a slot may have served a destroyed group).
    begin_write(s.issue);
    s.issue.issued.store(0, std::memory_order_relaxed);
    end_write(s.issue);
    begin_write(s.run);
    s.run.state.store(static_cast<std::uint32_t>(RunState::kIdle), std::memory_order_relaxed);
    s.run.seq.store(0, std::memory_order_relaxed);
    s.run.since_ns.store(now_ns(), std::memory_order_relaxed);
    s.run.wait_peer.store(-1, std::memory_order_relaxed);
    s.run.done.store(0, std::memory_order_relaxed);
    s.run.failed.store(0, std::memory_order_relaxed);
    s.run.busy_ns.store(0, std::memory_order_relaxed);
    s.run.outcome.store(0, std::memory_order_relaxed);
    end_write(s.run);
    begin_write(s.p2p);
    s.p2p.pending.store(0, std::memory_order_relaxed);
    s.p2p.completed.store(0, std::memory_order_relaxed);
    end_write(s.p2p);
    begin_write(s.identity);
    s.identity.global_rank.store(env_int(worker_env::kRank), std::memory_order_relaxed);
    s.identity.group_rank.store(group_rank, std::memory_order_relaxed);
    s.identity.group_size.store(group_size, std::memory_order_relaxed);
    s.identity.ordinal.store(ordinal, std::memory_order_relaxed);
    s.identity.group_id.store(group_id, std::memory_order_relaxed);
    end_write(s.identity);
    return SlotWriter(&s);
  }
  rh.overflow.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void release_slot(SlotWriter& writer) {
  Slot* s = writer.slot();
  if (!s) return;
  std::lock_guard lock(claim_mutex());
  if (Row* row = attached().row) {
    const std::uint64_t done = s->run.done.load(std::memory_order_relaxed);
    if (done > row->header.retired_done.load(std::memory_order_relaxed)) {
      row->header.retired_done.store(done, std::memory_order_release);
    }
  }
  begin_write(s->identity);
  s->identity.group_id.store(0, std::memory_order_relaxed);
  end_write(s->identity);
  s->identity.pid.store(0, std::memory_order_release);
  writer = SlotWriter();
}

}  // namespace ctrun::progress
