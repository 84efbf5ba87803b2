#pragma once
// The names in a job's checkpoint directory, in one place for the agent (the Python side, ctrun_torch.checkpoint's
// _contract.py, repeats them):
//   /dev/shm/ctrun-checkpoint-<agent pid>/        the job's directory (0700), made and removed by the agent
//     lock                                        flock'd by whoever allocates or removes snapshots (the limit)
//     notices.sock                                the agent's datagram socket: workers say "committed", "loaded"
//     rank-<R>/step-<S>.ckpt                      a complete snapshot of global rank R at step S
//     rank-<R>/.partial-<S>-<pid>                 a snapshot being written (renamed over step-<S>.ckpt when done)
//     rank-<R>/.spare                             the step that fell out of the newest kKeptSteps, kept for the
//                                                 rank's next save to write into (its pages already allocated)
//     .spill-<S>/rank-<R>.ckpt                    hard links to step S's snapshots while the spill process copies
//                                                 them to --checkpoint-dir (spill.hpp); a snapshot with another
//                                                 link never becomes a spare, so nothing writes into its pages
//     rank-<R>/.replicated                        the newest step of R the agent copied to another node ("<S>")
//     replica-rank-<R>/step-<S>.ckpt              another node's snapshot of R, received by this node's agent
//     replica-rank-<R>/.partial-<S>-<pid>         a replica being received (renamed when complete)
// A snapshot becomes visible only by that rename, so a save torn by a crash leaves a partial file and nothing
// else: the agent removes partial files before each attempt (no worker is alive then).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ctrun::agent::checkpoint {

inline constexpr std::string_view kDirPrefix = "ctrun-checkpoint-";
inline constexpr std::string_view kLockFile = "lock";
inline constexpr std::string_view kNoticeSocket = "notices.sock";
inline constexpr std::string_view kRankPrefix = "rank-";
inline constexpr std::string_view kStepPrefix = "step-";
inline constexpr std::string_view kStepSuffix = ".ckpt";
inline constexpr std::string_view kPartialPrefix = ".partial-";
inline constexpr std::string_view kSpareFile = ".spare";
inline constexpr std::string_view kSpillPrefix = ".spill-";
inline constexpr std::string_view kReplicatedFile = ".replicated";
inline constexpr std::string_view kReplicaPrefix = "replica-rank-";
// Complete steps kept per rank: two, so that a rank whose save of step S+1 is torn still holds S, and a rank one
// step ahead of a torn one still holds the step they share.
inline constexpr int kKeptSteps = 2;

std::string job_dir_name(int agent_pid);
std::string rank_dir_name(int global_rank);
std::string replica_dir_name(int global_rank);
std::string step_file_name(std::int64_t step);

// The agent pid of a job directory's name, the rank of a rank directory's, the step of a complete snapshot's;
// nullopt for any other name.
std::optional<int> agent_pid_of(std::string_view dir_name);
std::optional<int> rank_of(std::string_view dir_name);
std::optional<int> replica_rank_of(std::string_view dir_name);
std::optional<std::int64_t> step_of(std::string_view file_name);
bool is_partial(std::string_view file_name);

}  // namespace ctrun::agent::checkpoint
