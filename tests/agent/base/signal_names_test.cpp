// Signal names both ways (--signals-to-handle, the failure summary).
#include "agent/base/signal_names.hpp"

#include <gtest/gtest.h>

#include <csignal>

namespace ctrun::agent {
namespace {

TEST(SignalNames, BothWays) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_number("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(signal_number("HUP"), SIGHUP);
  EXPECT_EQ(signal_number("15"), 15);
  EXPECT_FALSE(signal_number("SIGNOPE"));
}

}  // namespace
}  // namespace ctrun::agent
