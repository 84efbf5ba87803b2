#pragma once
// Copies for the shared-memory algorithms' large outputs.

#include <cstddef>

namespace ctrun::comm::reduce {

// memcpy with non-temporal (streaming) stores where the CPU has them (x86-64: SSE2, every x86-64 CPU):
// the destination's lines are written to memory without being read first and without evicting the cache.
// For destinations that will not stay in the caches anyway (a 16 MiB all_gather output): a plain memcpy of a
// piece into a cold buffer first reads every destination line (read-for-ownership), 1.5x the memory traffic.
// Measured on the 2-core EPYC VM: 64 MiB written in 256 KiB pieces from a cache-resident staging buffer, 2.5 ms
// streamed vs 5.5 ms with memcpy. Stores are weakly ordered: call stream_fence() before anyone else may read
// the destination (the algorithms do it before they return).
void copy_streaming(void* dst, const void* src, std::size_t bytes);

// Orders every streaming store before later stores (sfence); a no-op where copy_streaming is a memcpy.
void stream_fence();

// copy_streaming when `streaming`, else memcpy.
void copy_out(void* dst, const void* src, std::size_t bytes, bool streaming);

}  // namespace ctrun::comm::reduce
