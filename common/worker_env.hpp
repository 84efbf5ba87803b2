#pragma once
// The worker environment contract, in one place: the variables the agent (agent/launch/worker_invocation.cpp) writes
// into every worker's environment, exactly as torchrun's LocalElasticAgent names them, and what comm reads back from
// them (once per group, into comm::Config::worker, comm/config.hpp). The writer and the readers both use these names
// and helpers, so the two sides cannot drift apart.

#include <optional>
#include <string>
#include <utility>

namespace ctrun::worker_env {

// Identity of the worker in the job.
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
// Where the workers' store is (hosted by the agent of group rank 0 when kUseAgentStore is "True").
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
// ctrun's own: this node's store relay ("host:port", agent/launch/store_relay.hpp), set with several nodes. A worker in
// agent-store mode connects there instead of MASTER_ADDR:MASTER_PORT (which keep naming the job's store): comm's
// env:// (comm/init), torch's rendezvous through ctrun_store_relay.py, which repeats this rule.
inline constexpr const char* kStoreRelay = "CTRUN_STORE_RELAY";
// Elastic bookkeeping.
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";
inline constexpr const char* kSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";
// torchrun's worker watchdog: "1" in the agent's environment makes it serve the FIFO named by kTimerFile
// (agent/process/file_timer.hpp), which every worker gets.
inline constexpr const char* kEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr const char* kTimerFile = "TORCHELASTIC_TIMER_FILE";
// ctrun's own: the progress region of this attempt (common/progress.hpp), which comm writes its
// collectives' progress into; and the file a Python worker's stack is dumped into on kStackDumpSignal (the
// sitecustomize.py ctrun puts on PYTHONPATH registers it with faulthandler).
inline constexpr const char* kProgressFile = "CTRUN_PROGRESS_FILE";
inline constexpr const char* kStackFile = "CTRUN_STACK_FILE";
inline constexpr const char* kStackSignal = "CTRUN_STACK_SIGNAL";
// The end of a Python worker's program (agent/teardown/exit_record.hpp): the attempt's exit-record file and this
// worker's slot in it, which ctrun's sitecustomize.py writes once the program has ended (and takes out of the
// environment, so that the worker's own child processes do not write it).
inline constexpr const char* kExitRecord = "CTRUN_EXIT_RECORD";
inline constexpr const char* kExitSlot = "CTRUN_EXIT_SLOT";
// ctrun's in-memory checkpoints (agent/checkpoint/, read by the Python module ctrun_torch.checkpoint, whose
// _contract.py repeats these names): the job's snapshot directory the agent owns, the node's memory limit in bytes,
// the store ("host:port") and key prefix where each rank's held steps are listed for this attempt; or, instead of
// the directory, why checkpoints are off for this job (the worker's error says it).
inline constexpr const char* kCheckpointDir = "CTRUN_CHECKPOINT_DIR";
inline constexpr const char* kCheckpointMemory = "CTRUN_CHECKPOINT_MEMORY";
inline constexpr const char* kCheckpointStore = "CTRUN_CHECKPOINT_STORE";
inline constexpr const char* kCheckpointKeys = "CTRUN_CHECKPOINT_KEYS";
// "1" when the agent listed this node's held steps under kCheckpointKeys before the attempt, "0" when the node held
// none (then it writes no key: a job that never saves finds its store exactly as torch would leave it).
inline constexpr const char* kCheckpointListed = "CTRUN_CHECKPOINT_LISTED";
inline constexpr const char* kCheckpointOff = "CTRUN_CHECKPOINT_OFF";
// --checkpoint-dir, where committed steps are copied: ck.load() falls back to it when memory holds nothing.
inline constexpr const char* kCheckpointSpillDir = "CTRUN_CHECKPOINT_SPILL_DIR";
// How many other nodes the agent copies this node's newest step to ("0": none; ck.wait() returns at once).
inline constexpr const char* kCheckpointReplicas = "CTRUN_CHECKPOINT_REPLICAS";

// The agent store's value of kUseAgentStore (torch compares with the Python literal "True").
inline constexpr const char* kTrue = "True";
inline constexpr const char* kFalse = "False";

// The keyspace workers of restart attempt `restart_count` use in the agent's store (torch's
// `PrefixStore(f"/worker/attempt_{restart_count}")`): a fresh one per attempt, so a key left by a failed attempt
// is never read by the next.
inline std::string attempt_prefix(int restart_count) { return "/worker/attempt_" + std::to_string(restart_count); }

// Reads a variable of the contract from this process's environment: nullopt when unset or empty.
std::optional<std::string> get(const char* name);

// kStoreRelay's value as (host, port): "host:port" or "[v6]:port"; nullopt when it is not of that form.
std::optional<std::pair<std::string, std::string>> relay_endpoint(const std::string& value);

}  // namespace ctrun::worker_env
