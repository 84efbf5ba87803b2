#pragma once
// `ctrun --exit-on-stdin-close ...`: what the multi-host launcher runs on every host. ssh gives a remote command
// no signal when the launcher or its connection dies, only EOF on the command's stdin. So this process runs the
// real agent as its child (the same argv without the flag) and watches stdin: at EOF it sends the agent SIGTERM
// (the agent stops its workers within --shutdown-timeout), and SIGKILL `grace` seconds later (the agent's
// guardian then kills the workers' process groups). SIGTERM/SIGINT/SIGHUP are passed on to the agent; the exit
// code is the agent's (128+N when it died of signal N).

#include <string>
#include <vector>

namespace ctrun::agent::multihost {

// `args`: ctrun's arguments (argv[1..]) with the first --exit-on-stdin-close removed. `secret_on_stdin`
// (`--secret-file -`): the first line of stdin is the job's secret, read here and handed to the agent as its own
// stdin's only line (a pipe), never through an argv or the environment.
int run_agent_watching_stdin(const std::vector<std::string>& args, double grace_seconds, bool secret_on_stdin = false);

// argv[1..] without the first --exit-on-stdin-close / --exit_on_stdin_close (an option: it precedes SCRIPT).
std::vector<std::string> without_stdin_watch_flag(std::vector<std::string> args);

}  // namespace ctrun::agent::multihost
