#pragma once
// HangWatch: everything the agent does about hangs and stragglers, behind the few calls its loop makes (the
// wiring plan in docs/hang.md). Per attempt it owns the progress region and names it, and each rank's stack
// file, in the workers' environment; on the loop's timer (tick: reads shared memory and /proc only, never
// blocks) it runs the detector over the local records and the other nodes' summaries, asks the local Python
// workers for stack dumps at a report, collects them on later ticks, and says which local ranks a verdict
// fails (only the culprit's own agent acts on it). Store I/O (publishing this node's summary, fetching the
// others') stays with the caller's helper thread: summary() and remote() are the two ends. What a tick finds
// comes out typed; agent/hang/wording.hpp is the one place that words it.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/hang/auto_timeout.hpp"
#include "agent/hang/detector.hpp"
#include "agent/hang/region.hpp"
#include "agent/hang/summary.hpp"

namespace ctrun::agent::hang {

struct WatchConfig {
  DetectorConfig detector;
  std::string host;
  int agent_pid = 0;
  int local_ranks = 1;
  std::string shm_dir = "/dev/shm";
  double dump_wait_s = 2;  // how long a requested stack dump may take to appear
  // `--hang-timeout auto`: the detector's hang timeout is learned from this node's records, each attempt anew.
  std::optional<AutoTimeout> auto_timeout;
};

struct LocalWorker {
  int local_rank = 0;
  int global_rank = 0;
  int pid = 0;
  std::string stack_file;
};

// Why a rank's stack is missing.
enum class NoStack {
  kNone,         // it is there
  kNoStackFile,  // ctrun runs with --log-dir /dev/null
  kNoHandler,    // not a Python worker with ctrun's sitecustomize, or still starting
  kExited,       // the worker has exited
  kNotWritten,   // asked, but nothing came within dump_wait_s
};

struct RankStack {
  LocalWorker worker;
  std::string text;  // the dump; empty when `none` says why not
  NoStack none = NoStack::kNone;
};

// A local rank to treat as failed: whose verdict (this node's, or group rank 0's agent's) and its stack.
struct Failure {
  LocalWorker worker;
  std::optional<HangFinding> verdict;  // this node's verdict
  std::string remote_note;             // else: the verdict as group rank 0's agent worded it
  std::string stack;                   // as collected (empty: none came)
};

struct WatchOutput {
  Findings findings;              // this tick's hangs, point-to-point waits and stragglers
  std::optional<double> quiet_s;  // workers without records: no CPU time nor output for this long (said once)
  std::vector<RankStack> stacks;  // the culprits' stacks, once written (or given up), for the console
  std::vector<Failure> failures;  // a verdict's culprits on this node: treat them as failed workers
  std::optional<std::vector<RankStack>> requested_stacks;  // request_stacks()' answer, once complete
  // `--hang-timeout auto`: the timeout chosen, when it was first learned this attempt or rose by a tenth or more.
  std::optional<Learned> learned;
};

class HangWatch {
 public:
  explicit HangWatch(WatchConfig config);
  ~HangWatch();

  // A new attempt: a fresh region (throws std::runtime_error when it cannot be made: run without records).
  void begin_attempt(int attempt, int restarts);
  // The variables worker `local_rank` gets (CTRUN_PROGRESS_FILE, CTRUN_STACK_FILE, CTRUN_STACK_SIGNAL).
  std::map<std::string, std::string> env_for(int local_rank, const std::string& stack_file) const;
  void set_workers(std::vector<LocalWorker> workers);
  // A local rank wrote to stdout/stderr (for the quiet rule of workers without records).
  void note_output(int local_rank, double now_s);
  // The attempt is over (its workers were reaped): the region goes.
  void end_attempt();

  WatchOutput tick(double now_s);

  // On demand (`ctrun --status --stacks`, for any worker, torch's own gloo/NCCL included): asks every local worker
  // for its Python stack now. A later tick's WatchOutput::requested_stacks has every rank's, each once written or
  // with the reason it has none (after dump_wait_s). A request while one is open joins it.
  void request_stacks(double now_s);

  // This node's summary (records as of the last tick) and whether it is due for publishing (PublishPacer; a
  // stalled node publishes its changes within seconds).
  std::optional<std::string> summary_due(double now_s, int nodes);
  // A local rank made no progress for half the time a hang is reported after (at least 2 s): summary.hpp stalled().
  bool stalled() const;
  void remote(const std::string& node, const std::string& summary_text, double now_s);

  // Several nodes: the agent of group rank 0 sees every rank and publishes its verdicts (verdicts_of(), one key);
  // every other agent reads them (remote_verdicts) and fails those of its own ranks, as for a local verdict.
  void remote_verdicts(const Verdicts& verdicts, double now_s);

  const WatchConfig& config() const { return config_; }
  const Detector& detector() const { return detector_; }
  // Every rank of the job seen at the last tick (this node's and the other nodes' summaries): the live table.
  const std::vector<RankRecord>& ranks() const { return last_all_; }
  // This node's ranks as of the last tick (empty once the attempt ended): the agent's metrics.
  const std::vector<RankRecord>& local_ranks() const { return last_local_; }
  // The most collectives one group completed on one local rank in this attempt (kept after end_attempt() until the
  // next begin_attempt(): the agent counts progress once the attempt is over).
  std::uint64_t completed() const { return completed_; }

 private:
  // The parts of a tick, in its order.
  void read_records(double now_s);
  void act_on(const Findings& findings, double now_s);
  std::optional<double> watch_quiet(double now_s);
  std::optional<Learned> learn(double now_s);
  std::vector<RankStack> collect_shown_stacks(double now_s);
  std::vector<Failure> due_failures(double now_s);
  std::optional<std::vector<RankStack>> collect_asked(double now_s);

  std::vector<RankRecord> local_records() const;
  void request_dumps(double now_s);
  // Puts a culprit's dump (asked for) onto the console once written, once per attempt.
  void show_dump(const LocalWorker& worker);
  const LocalWorker* worker_of(int global_rank) const;
  const LocalWorker* worker_at(int local_rank) const;

  WatchConfig config_;
  Detector detector_;
  TimeoutLearner learner_;
  double told_timeout_s_ = 0;  // the learned timeout last said (0: none yet this attempt)
  QuietWatch quiet_;
  PublishPacer pacer_;
  RemoteView remote_;
  std::unique_ptr<Region> region_;
  int restarts_ = 0;
  std::uint64_t counter_ = 0;
  std::uint64_t completed_ = 0;
  void note_completed(const std::vector<RankRecord>& local);
  std::vector<LocalWorker> workers_;
  std::map<int, double> last_output_;
  std::vector<RankRecord> last_local_;
  std::vector<RankRecord> last_all_;
  bool quiet_reported_ = false;
  struct PendingDump {
    std::uint64_t offset = 0;
    double until_s = 0;
    bool show = false;   // a culprit's, not on the console yet
    bool shown = false;  // marked for the console once already
    std::string text;    // what was collected
  };
  std::map<int, PendingDump> dumps_;  // by local rank
  struct PendingFail {
    double due_s = 0;  // fail by then even without a stack
    std::optional<HangFinding> verdict;
    std::string remote_note;
  };
  std::map<int, PendingFail> fails_;  // verdicts waiting for their culprit's stack (by local rank)
  std::set<int> failed_;              // local ranks already handed out to fail (this attempt)
  struct AskedStack {
    std::uint64_t offset = 0;
    RankStack stack;
  };
  std::vector<AskedStack> asked_;  // request_stacks()' open request, by local worker
  double asked_until_s_ = 0;
  bool asking_ = false;
};

}  // namespace ctrun::agent::hang
