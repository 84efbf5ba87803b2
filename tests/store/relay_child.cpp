// A store relay as a process of its own, for the tests whose clients are other programs (torch 1.13 and 2.6 clients
// in tests/integration/store_relay_test.py): relays to the store at HOST PORT, prints
// "relay listening on 127.0.0.1:PORT" once it serves, and runs until stdin closes or SIGTERM/SIGINT.
//   store_relay_child HOST PORT
#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "store/relay.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: store_relay_child HOST PORT\n";
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // the relay's thread inherits the mask: the signal comes here
  ctrun::store::Relay relay{ctrun::store::RelayOptions{}};
  relay.start();
  relay.connect(argv[1], static_cast<std::uint16_t>(std::stoi(argv[2])));
  std::cout << "relay listening on " << relay.endpoint() << std::endl;
  for (;;) {
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (::poll(&in, 1, 100) > 0) {
      char c;
      if (::read(STDIN_FILENO, &c, 1) <= 0) break;
    }
    timespec none{0, 0};
    if (sigtimedwait(&stop, nullptr, &none) > 0) break;
  }
  relay.stop();
  return 0;
}
