#pragma once
// What the agent does once its loop has stopped, before run() returns: queued console and ctrun lines get a
// bounded moment, dropped console lines are counted, `shutdown` goes to the event log, and when a blocking call is
// still in flight on the helper lane (a signal came mid-rendezvous or mid-barrier) the process ends at once with
// _exit instead of waiting for it (the workers are gone already; the kernel closes the sockets).

#include <chrono>

namespace ctrun::agent {

class ConsoleSink;
class EventLog;
class HelperLane;

// signalled: a death signal came (less patience for slow consoles). Returns only when nothing is in flight.
void end_output_or_exit(ConsoleSink& console, EventLog& events, HelperLane& lane, bool signalled, int exit_code,
                        std::chrono::milliseconds leave_budget);

}  // namespace ctrun::agent
