#pragma once
// The agent's side of a job's checkpoint directory (names: layout.hpp): made when the agent starts, kept across
// worker restarts (it is the agent's, not a worker's), removed when the job ends, and swept by the next ctrun when
// a kill -9 left it behind. Workers write and publish snapshots in it; the agent reconciles it between attempts.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ctrun::agent::checkpoint {

struct HeldStep {
  std::int64_t step = 0;
  std::uint64_t bytes = 0;  // memory it takes (allocated blocks)
};

struct Reconciled {
  int partial_files = 0;  // torn saves removed
  std::uint64_t partial_bytes = 0;
  int pruned_steps = 0;  // complete steps beyond the newest kKeptSteps of a rank (a worker died before pruning)
};

// The directory's lock (its `lock` file, flock'd), held while snapshots or replicas are allocated or removed: the
// limit is checked and the space taken in one step (workers take it in ck.save).
class DirLock {
 public:
  explicit DirLock(const std::string& dir);
  ~DirLock();  // releases the flock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_;
};

// Every step a node holds, per global rank: its ranks' own snapshots and the replicas it received.
struct NodeHoldings {
  std::map<int, std::vector<std::int64_t>> own;       // rank-<R>/ (oldest first)
  std::map<int, std::vector<std::int64_t>> replicas;  // replica-rank-<R>/
};

class JobDirectory {
 public:
  // Creates <root>/ctrun-checkpoint-<agent_pid> (mode 0700) and its lock file, replacing a leftover of that name.
  // Throws std::runtime_error saying what failed.
  explicit JobDirectory(int agent_pid, const std::string& root = "/dev/shm");
  // The same directory without owning it (neither made nor removed here): for the helper lane's gather, which must
  // not touch the owner's object on the loop. Every method works on the files alone.
  static std::unique_ptr<JobDirectory> view(const std::string& path);
  ~JobDirectory();  // the owner removes the directory and every snapshot in it
  JobDirectory(const JobDirectory&) = delete;
  JobDirectory& operator=(const JobDirectory&) = delete;

  const std::string& path() const { return path_; }
  // The complete steps global rank `rank` holds, oldest first.
  std::vector<HeldStep> held(int rank) const;
  // The replicas of `rank` this node received from another node, oldest first.
  std::vector<HeldStep> held_replicas(int rank) const;
  // Every rank directory and replica directory, whatever rank this node runs now (ranks move between nodes when a
  // round forms anew: what a node held for its former ranks is still the job's state).
  NodeHoldings holdings() const;
  // Removes every complete step above `step` (own and replicas): the job resumes from `step`, so what lies beyond
  // it belongs to a timeline the job abandoned. Under the lock; between attempts. Returns how many went.
  int drop_steps_above(std::int64_t step);
  // Memory every file of the directory takes (partial snapshots included; a file of several links once): what
  // --checkpoint-memory bounds.
  std::uint64_t used_bytes() const;
  // Links every listed rank's snapshot of `step` into <dir>/.spill-<step>/rank-<R>.ckpt (layout.hpp), under the
  // lock, which it only tries to take: a worker holding it (a save allocating) gives kBusy, to try again later,
  // never a wait on the caller's thread. kMissing: a rank does not hold the step (nothing is left linked).
  enum class Pin { kPinned, kBusy, kMissing };
  Pin pin_step(std::int64_t step, const std::vector<int>& ranks, std::string& pinned_dir);
  // Between attempts (no worker alive), under the lock: torn saves removed, each rank pruned to its newest
  // kKeptSteps complete steps.
  Reconciled reconcile();

 private:
  struct Unowned {};
  JobDirectory(std::string path, Unowned) : path_(std::move(path)), owned_(false) {}

  std::string path_;
  bool owned_ = true;
};

// Memory every file under `dir` takes (allocated blocks).
std::uint64_t used_bytes_of(const std::string& dir);

// Removes <root>/ctrun-checkpoint-<pid> directories whose agent pid is no longer alive (a ctrun killed with SIGKILL
// cannot remove its own). Returns the paths removed.
std::vector<std::string> sweep_stale_job_dirs(const std::string& root = "/dev/shm");

}  // namespace ctrun::agent::checkpoint
