#pragma once
// The agent's own signals, on its loop (Asio signal_sets: never a handler that runs agent code): the death signals
// (--signals-to-handle) and the forwarded ones (SIGUSR1/SIGUSR2 unless they are death signals: passed on to every
// worker's process group while the job goes on; workers use them for checkpoint-on-preemption, Slurm's --signal,
// and stack dumps).

#include <functional>
#include <memory>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class SignalWatch {
 public:
  SignalWatch(boost::asio::io_context& io, const std::vector<int>& death, const std::vector<int>& forwarded);
  ~SignalWatch();

  // Each signal that arrives, on the loop, until cancel().
  void start(std::function<void(int sig)> on_death, std::function<void(int sig)> on_forwarded);
  void cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
