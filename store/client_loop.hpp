#pragma once
// The I/O thread of MuxStore connections: one Asio loop, shared by every MuxStore given it (a process that
// simulates thousands of agents holds one for all of them; an agent's rendezvous store makes its own). Nothing
// that blocks runs on it.

#include <memory>
#include <thread>

namespace boost::asio {
class io_context;
}

namespace ctrun::store {

class ClientLoop {
 public:
  ClientLoop();   // starts the thread
  ~ClientLoop();  // stops and joins it
  ClientLoop(const ClientLoop&) = delete;
  ClientLoop& operator=(const ClientLoop&) = delete;

  boost::asio::io_context& io();
  bool on_loop_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace ctrun::store
