#include "agent/teardown/exit_record.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "agent/base/stale_files.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::teardown {
namespace {

// Another process writes the slot while the agent reads it: every field is loaded whole, and a field only after the
// flag its writer stores after it (acquire).
std::uint32_t load_u32(const unsigned char* slot, std::size_t offset) {
  return __atomic_load_n(reinterpret_cast<const std::uint32_t*>(slot + offset), __ATOMIC_ACQUIRE);
}
std::int64_t load_i64(const unsigned char* slot, std::size_t offset) {
  return __atomic_load_n(reinterpret_cast<const std::int64_t*>(slot + offset), __ATOMIC_ACQUIRE);
}

}  // namespace

ExitRecord read_slot(const unsigned char* slot) {
  ExitRecord r;
  r.ended = load_u32(slot, 0) == 1;
  if (!r.ended) return r;
  r.pid = static_cast<int>(load_u32(slot, 4));
  r.status = static_cast<int>(load_u32(slot, 8));
  r.flags = load_u32(slot, 12);
  r.ended_ns = load_i64(slot, 16);
  r.exit_called = load_u32(slot, 24) == 1;
  if (r.exit_called) r.exit_status = static_cast<int>(load_u32(slot, 28));
  return r;
}

ExitRecords::ExitRecords(const std::string& root, int agent_pid, std::uint64_t attempt, int local_ranks)
    : path_(root + "/" + kFilePrefix + std::to_string(agent_pid) + "-" + std::to_string(attempt)),
      local_ranks_(local_ranks) {
  const std::size_t bytes = kSlotBytes * static_cast<std::size_t>(std::max(local_ranks, 1));
  const auto fail = [&](const char* what) {
    const int e = errno;
    ::unlink(path_.c_str());
    return std::runtime_error(std::string("cannot ") + what + " " + path_ + ": " + std::strerror(e));
  };
  ::unlink(path_.c_str());
  // Workers open it to write their slot (mode 0600: the job's user, as the workers run).
  const int fd = ::open(path_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw fail("create");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {  // zeroed pages: no slot has ended
    ::close(fd);
    throw fail("size");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw fail("map");
  map_ = static_cast<const unsigned char*>(p);
}

ExitRecords::~ExitRecords() {
  ::munmap(const_cast<unsigned char*>(map_), kSlotBytes * static_cast<std::size_t>(std::max(local_ranks_, 1)));
  ::unlink(path_.c_str());
}

std::map<std::string, std::string> ExitRecords::env_for(int local_rank) const {
  return {{worker_env::kExitRecord, path_}, {worker_env::kExitSlot, std::to_string(local_rank)}};
}

ExitRecord ExitRecords::read(int local_rank) const {
  if (local_rank < 0 || local_rank >= local_ranks_) return {};
  return read_slot(map_ + kSlotBytes * static_cast<std::size_t>(local_rank));
}

std::vector<std::string> sweep_stale_exit_records(const std::string& root) {
  return sweep_files_of_dead_agents(root, kFilePrefix);
}

}  // namespace ctrun::agent::teardown
