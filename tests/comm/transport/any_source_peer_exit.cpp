// Failure test program (run by comm_launch --no-kill): every rank but one waits in a receive from any source that
// nobody answers; that rank (argv[1], default the last) exits (code 3) after 300 ms, having sent nothing. Each
// waiter must fail within 10 s, naming the rank that exited (exit 0 then), never hang (the launcher's timeout) and
// never complete (exit 1). Over tcp, rank 0 exiting is the case where no waiter has a connection to it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group.hpp"

int main(int argc, char** argv) {
  ctrun::comm::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);  // far above the bound checked below: detection must not wait for it
  auto pg = ctrun::comm::ProcessGroup::init("env://", options);
  const int last = argc > 1 ? std::atoi(argv[1]) : pg->size() - 1;
  if (pg->rank() == last) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(3);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    std::vector<float> v(16);
    const int from = pg->recv(v, ctrun::comm::kAnySource, 0);
    std::printf("rank %d: the receive completed from rank %d although nobody sent\n", pg->rank(), from);
    return 1;
  } catch (const ctrun::comm::CommError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool named = std::string(e.what()).find("rank " + std::to_string(last)) != std::string::npos;
    std::printf("rank %d raised after %.2f s: %s\n", pg->rank(), s, e.what());
    // Stay a while: a waiter that exits at once would itself be a rank that left while the others wait (and be
    // named by them, rightly, instead of the one this test stops).
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return s < 10 && named ? 0 : 1;
  }
}
