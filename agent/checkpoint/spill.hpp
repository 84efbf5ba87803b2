#pragma once
// --checkpoint-dir DIR: committed steps copied from the agent's memory to storage in the background, so that a job
// that lost every node resumes from DIR (docs/checkpoint.md). The agent does not copy itself (its loop must never
// block on a disk): when every local rank has committed a step that is due (--checkpoint-dir-every steps after
// the last one copied) and no copy runs, it links the step's snapshots under the job directory's .spill-<S>/
// (JobDirectory::pin_step: their pages are then never reused by a later save) and starts one spill process,
// `PYTHON -m ctrun_torch.checkpoint.spill` (the workers' python), at the lowest CPU and I/O priority. It writes
// DIR/step-<S>/ atomically in torch DCP's file layout (or torch.save files), and exits. The process outlives worker
// restarts (it is not a worker: WorkerHooks::helpers spares it, and it does not carry the job's mark), is killed
// with its process group when the job ends, and its death loses nothing held in memory: the agent removes the
// links, and the next due step is tried. After a kill -9 of ctrun it finishes its one copy and exits.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/event_log.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::checkpoint {

class JobDirectory;

struct SpillSettings {
  std::string out_dir;                     // --checkpoint-dir
  int every = 1;                           // --checkpoint-dir-every N: steps (0 when given as a duration)
  double every_seconds = 0;                // --checkpoint-dir-every 30s, 5m, 1h: seconds (0 when given in steps)
  std::vector<std::string> python;         // argv before "-m": the workers' python
  std::map<std::string, std::string> env;  // on top of the agent's environment (PYTHONPATH)
};

// Whether a step every local rank committed is due for a copy: the first one always; then, by steps, one at least
// `every` steps after the last copy started, or, by time, any step once `every_seconds` passed since it started.
bool spill_due(const SpillSettings& settings, std::int64_t step, std::optional<std::int64_t> last_started_step,
               double seconds_since_last_start);

// Checks that `dir` is a directory this process can write (made when missing, with its parents); "" when it is,
// else a sentence saying what is wrong (for --checkpoint-dir's usage error).
std::string check_spill_dir(const std::string& dir);

class Spiller {
 public:
  Spiller(boost::asio::io_context& io, SpillSettings settings, JobDirectory& dir, EventLog& events);
  ~Spiller();  // kills and reaps a running spill process
  Spiller(const Spiller&) = delete;
  Spiller& operator=(const Spiller&) = delete;

  // The attempt's local ranks (global numbers) and world size: a step is complete on this node when each of them
  // committed it.
  void begin_attempt(const std::vector<int>& ranks, int world_size);
  // A local rank committed `step` (a worker's notice).
  void committed(int rank, std::int64_t step);
  // The newest step written to --checkpoint-dir completely by this run (-1: none yet).
  std::int64_t spilled_step() const;
  // The running spill process, for the worker group to spare.
  std::vector<pid_t> helpers() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ctrun::agent::checkpoint
