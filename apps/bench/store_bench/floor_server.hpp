#pragma once
// The physical floor for the round-trip benchmark: the least a server can do per legacy ADD on this kernel.
// One epoll thread, level-triggered, a buffer per connection, a hash map of counters; it answers legacy ADD
// frames (opcode 3, u64 key length, key, i64 delta -> i64) and nothing else, closing on anything else. No
// limits, no accounting, no logging: what ctstore's features cost shows as the gap to this.
//
// Run as a child of store_bench (`store_bench --serve-floor`), so that its CPU time and RSS can be read
// from /proc like the other servers'. Prints "floor listening on 127.0.0.1:PORT".

namespace ctrun::bench {

// Serves until killed. Returns non-zero if it cannot listen.
int serve_floor();

}  // namespace ctrun::bench
