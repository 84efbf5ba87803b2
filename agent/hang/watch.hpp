#pragma once
// HangWatch: everything the agent does about hangs and stragglers, behind the few calls its loop makes (the
// wiring plan in docs/hang.md). Per attempt it owns the progress region and names it, and each rank's stack
// file, in the workers' environment; on the loop's timer (tick: reads shared memory and /proc only, never
// blocks) it runs the detector over the local records and the other nodes' summaries, asks the local Python
// workers for stack dumps at a report, collects them on later ticks, and says which local ranks a verdict
// fails (only the culprit's own agent acts on it). Store I/O (publishing this node's summary, fetching the
// others') stays with the caller's helper thread: summary() and remote() are the two ends.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
};

struct LocalWorker {
  int local_rank = 0;
  int global_rank = 0;
  int pid = 0;
  std::string stack_file;
};

struct WatchOutput {
  std::vector<std::string> warnings;            // hang reports, verdicts, quiet jobs: the log and the console
  std::vector<std::string> infos;               // stragglers, hangs resolved: the log
  std::map<int, std::string> stragglers;        // group ordinal -> this tick's straggler line (also in infos)
  std::vector<nlohmann::json> events;           // the JSON event log
  std::vector<int> fail_local_ranks;            // a verdict's culprits on this node: treat them as failed workers
  std::vector<std::string> stacks;              // "stack of rank 2 (...):\n<dump>" for the console
  std::map<int, std::string> failure_notes;     // local rank -> what its error file and the failure summary say
  std::map<int, std::string> failure_stacks;    // local rank -> its stack (the error file's py_callstack)
  std::optional<std::string> requested_stacks;  // request_stacks()' answer, once complete
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

  // This node's summary (records as of the last tick) and whether it is due for publishing.
  std::optional<std::string> summary_due(double now_s, int nodes);
  void remote(const std::string& node, const std::string& summary_text, double now_s);

  // Several nodes: the agent of group rank 0 sees every rank and publishes its verdicts (verdicts_text, one key);
  // every other agent reads them (remote_verdicts) and fails those of its own ranks, as for a local verdict.
  std::string verdicts_text() const;
  void remote_verdicts(const std::string& text, double now_s);

  std::string table_text() const;
  nlohmann::json table_json() const;
  const Detector& detector() const { return detector_; }
  // This node's ranks as of the last tick (empty once the attempt ended): the agent's metrics.
  const std::vector<RankRecord>& local_ranks() const { return last_local_; }

 private:
  std::vector<RankRecord> local_records() const;
  void request_dumps(double now_s);

  WatchConfig config_;
  Detector detector_;
  QuietWatch quiet_;
  PublishPacer pacer_;
  RemoteView remote_;
  std::unique_ptr<Region> region_;
  int restarts_ = 0;
  std::uint64_t counter_ = 0;
  std::vector<LocalWorker> workers_;
  std::map<int, double> last_output_;
  std::vector<RankRecord> last_local_;
  std::vector<RankRecord> last_all_;
  bool quiet_reported_ = false;
  struct PendingDump {
    std::uint64_t offset = 0;
    double until_s = 0;
    bool show = false;  // a culprit's: onto the console
    std::string title;
    std::string text;  // what was collected
  };
  std::map<int, PendingDump> dumps_;  // by local rank
  struct PendingFail {
    double due_s = 0;  // fail by then even without a stack
    std::string note;
  };
  std::map<int, PendingFail> fails_;  // verdicts waiting for their culprit's stack (by local rank)
  std::set<int> failed_;              // local ranks already handed out to fail (this attempt)
  struct AskedStack {
    LocalWorker worker;
    std::uint64_t offset = 0;
    std::string why_none;  // set when no dump was asked for (or it never came)
    std::string text;
  };
  std::vector<AskedStack> asked_;  // request_stacks()' open request, by local worker
  double asked_until_s_ = 0;
  bool asking_ = false;
  std::optional<std::string> collect_asked(double now_s);
};

}  // namespace ctrun::agent::hang
