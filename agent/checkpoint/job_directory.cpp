#include "agent/checkpoint/job_directory.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "agent/checkpoint/layout.hpp"

namespace ctrun::agent::checkpoint {
namespace fs = std::filesystem;
namespace {

std::uint64_t allocated_bytes(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

std::vector<HeldStep> held_in(const fs::path& dir) {
  std::vector<HeldStep> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto step = step_of(it->path().filename().string())) out.push_back({*step, allocated_bytes(it->path())});
  }
  std::sort(out.begin(), out.end(), [](const HeldStep& a, const HeldStep& b) { return a.step < b.step; });
  return out;
}

std::vector<std::int64_t> steps_of(const std::vector<HeldStep>& held) {
  std::vector<std::int64_t> out;
  for (const auto& h : held) out.push_back(h.step);
  return out;
}

}  // namespace

DirLock::DirLock(const std::string& dir)
    : fd_(::open((dir + "/" + std::string(kLockFile)).c_str(), O_RDWR | O_CLOEXEC)) {
  if (fd_ >= 0) ::flock(fd_, LOCK_EX);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

JobDirectory::JobDirectory(int agent_pid, const std::string& root) : path_(root + "/" + job_dir_name(agent_pid)) {
  std::error_code ec;
  fs::remove_all(path_, ec);  // a leftover of a process that had our pid
  if (::mkdir(path_.c_str(), 0700) != 0) {
    throw std::runtime_error("cannot create the checkpoint directory " + path_ + ": " + std::strerror(errno) + " (is " +
                             root + " a writable tmpfs?)");
  }
  const int fd = ::open((path_ + "/" + std::string(kLockFile)).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    fs::remove_all(path_, ec);
    throw std::runtime_error("cannot create the lock file in " + path_ + ": " + why);
  }
  ::close(fd);
}

std::unique_ptr<JobDirectory> JobDirectory::view(const std::string& path) {
  return std::unique_ptr<JobDirectory>(new JobDirectory(path, Unowned{}));
}

JobDirectory::~JobDirectory() {
  if (!owned_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<HeldStep> JobDirectory::held(int rank) const { return held_in(fs::path(path_) / rank_dir_name(rank)); }

std::vector<HeldStep> JobDirectory::held_replicas(int rank) const {
  return held_in(fs::path(path_) / replica_dir_name(rank));
}

NodeHoldings JobDirectory::holdings() const {
  NodeHoldings out;
  std::error_code ec;
  for (fs::directory_iterator dir(path_, ec), end; !ec && dir != end; dir.increment(ec)) {
    const std::string name = dir->path().filename().string();
    if (auto rank = rank_of(name)) {
      if (auto steps = steps_of(held_in(dir->path())); !steps.empty()) out.own[*rank] = steps;
    } else if (auto replica = replica_rank_of(name)) {
      if (auto steps = steps_of(held_in(dir->path())); !steps.empty()) out.replicas[*replica] = steps;
    }
  }
  return out;
}

int JobDirectory::drop_steps_above(std::int64_t step) {
  DirLock lock(path_);
  int dropped = 0;
  std::error_code ec;
  for (fs::directory_iterator dir(path_, ec), end; !ec && dir != end; dir.increment(ec)) {
    const std::string name = dir->path().filename().string();
    if (!rank_of(name) && !replica_rank_of(name)) continue;
    for (const HeldStep& h : held_in(dir->path())) {
      if (h.step > step && ::unlink((dir->path() / step_file_name(h.step)).c_str()) == 0) ++dropped;
    }
  }
  return dropped;
}

std::uint64_t JobDirectory::used_bytes() const { return used_bytes_of(path_); }

std::uint64_t used_bytes_of(const std::string& dir) {
  std::uint64_t total = 0;
  std::set<ino_t> linked;  // files of several links (pinned for the spill process) count once
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (!it->is_regular_file(ec) || ::stat(it->path().c_str(), &st) != 0) continue;
    if (st.st_nlink > 1 && !linked.insert(st.st_ino).second) continue;
    total += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

JobDirectory::Pin JobDirectory::pin_step(std::int64_t step, const std::vector<int>& ranks, std::string& pinned_dir) {
  const int fd = ::open((path_ + "/" + std::string(kLockFile)).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Pin::kBusy;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return Pin::kBusy;
  }
  const fs::path dir = fs::path(path_) / (std::string(kSpillPrefix) + std::to_string(step));
  std::error_code ec;
  fs::remove_all(dir, ec);  // a leftover of a spill process that was killed
  Pin result = fs::create_directory(dir, ec) ? Pin::kPinned : Pin::kMissing;
  for (int rank : ranks) {
    if (result != Pin::kPinned) break;
    const fs::path from = fs::path(path_) / rank_dir_name(rank) / step_file_name(step);
    const fs::path to = dir / (rank_dir_name(rank) + std::string(kStepSuffix));
    if (::link(from.c_str(), to.c_str()) != 0) result = Pin::kMissing;
  }
  if (result != Pin::kPinned) fs::remove_all(dir, ec);
  ::close(fd);  // releases the flock
  pinned_dir = result == Pin::kPinned ? dir.string() : "";
  return result;
}

Reconciled JobDirectory::reconcile() {
  DirLock lock(path_);
  Reconciled out;
  std::error_code ec;
  for (fs::directory_iterator dir(path_, ec), end; !ec && dir != end; dir.increment(ec)) {
    const std::string name = dir->path().filename().string();
    if (!rank_of(name) && !replica_rank_of(name)) continue;
    std::error_code files_ec;
    for (fs::directory_iterator f(dir->path(), files_ec), fend; !files_ec && f != fend; f.increment(files_ec)) {
      if (!is_partial(f->path().filename().string())) continue;
      const std::uint64_t bytes = allocated_bytes(f->path());
      if (::unlink(f->path().c_str()) == 0) {
        ++out.partial_files;
        out.partial_bytes += bytes;
      }
    }
    const auto steps = held_in(dir->path());
    for (std::size_t i = 0; i + kKeptSteps < steps.size(); ++i) {
      if (::unlink((dir->path() / step_file_name(steps[i].step)).c_str()) == 0) ++out.pruned_steps;
    }
  }
  return out;
}

std::vector<std::string> sweep_stale_job_dirs(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const auto pid = agent_pid_of(it->path().filename().string());
    if (!pid || *pid == ::getpid()) continue;
    if (::kill(*pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to signal: leave it)
    std::error_code rm;
    if (fs::remove_all(it->path(), rm) > 0 && !rm) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace ctrun::agent::checkpoint
