#pragma once
// The agent's side of the progress region (common/progress.hpp): one per attempt, created before the attempt's
// workers start and removed when the attempt is over, so a dying attempt's workers cannot write into the next
// one's. A region a kill -9'd ctrun left behind is removed by the next ctrun's sweep_stale_regions().

#include <string>
#include <vector>

#include "agent/hang/records.hpp"
#include "common/progress.hpp"

namespace ctrun::agent::hang {

class Region {
 public:
  // Creates /dev/shm/ctrun-progress-<agent_pid>-<attempt> (replacing a leftover of the same name) with rows for
  // `local_ranks` ranks. Throws std::runtime_error saying what failed when /dev/shm cannot hold it.
  Region(int agent_pid, int attempt, int local_ranks, const std::string& dir = "/dev/shm");
  ~Region();  // unmaps and unlinks
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  // The value of worker_env::kProgressFile for this attempt's workers.
  const std::string& path() const { return path_; }
  const progress::RegionHeader* header() const { return header_; }
  progress::RegionHeader* mutable_header() { return header_; }  // tests: play a worker
  int local_ranks() const { return local_ranks_; }

  // Every slot in use of local rank `local_rank`, times as durations up to now (CLOCK_MONOTONIC). Parts caught
  // mid-write too often (a writer killed inside its few stores) are left out of this read; the next read retries.
  RankRecord read(int local_rank) const;

 private:
  std::string path_;
  progress::RegionHeader* header_ = nullptr;
  int local_ranks_ = 0;
};

// Removes `dir`/ctrun-progress-<pid>-<attempt> files whose agent pid is no longer alive (a ctrun killed with
// SIGKILL cannot remove its own). Returns the paths removed. A pid reused by an unrelated process keeps its file
// until that process ends (harmless: a few KiB).
std::vector<std::string> sweep_stale_regions(const std::string& dir = "/dev/shm");

}  // namespace ctrun::agent::hang
