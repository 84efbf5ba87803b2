#pragma once
// Every collective algorithm of the cpu backend, one per file in this folder. Each runs on a Context and
// blocks until done (the backend runs it on its worker thread). AVG arrives here as SUM: the backend divides.
// selection.hpp picks one per call from the message size and group size.

#include <vector>

#include "comm/algorithms/context.hpp"
#include "comm/buffer.hpp"

namespace ctrun::comm::algorithms {

// all_reduce
void all_reduce_ring(Context& ctx, Buffer buffer, ReduceOp op);                // bandwidth-optimal, chunked
void all_reduce_recursive_doubling(Context& ctx, Buffer buffer, ReduceOp op);  // log2(n) steps, small messages
void all_reduce_halving_doubling(Context& ctx, Buffer buffer, ReduceOp op);    // 2 log2(n) halving steps, middle
void all_reduce_tree(Context& ctx, Buffer buffer, ReduceOp op);                // pipelined binary tree
void all_reduce_double_binary_tree(Context& ctx, Buffer buffer, ReduceOp op);  // two trees, half the data each

// broadcast / reduce
void broadcast_tree(Context& ctx, Buffer buffer, int root);   // binomial tree: log2(n) latency
void broadcast_chain(Context& ctx, Buffer buffer, int root);  // pipelined chain: bandwidth for large messages
void reduce_tree(Context& ctx, Buffer buffer, int root, ReduceOp op);
void reduce_chain(Context& ctx, Buffer buffer, int root, ReduceOp op);

// gathers and scatters
void all_gather_ring(Context& ctx, const std::vector<Buffer>& outputs, Buffer input);
void all_gather_direct(Context& ctx, const std::vector<Buffer>& outputs, Buffer input);
void gather_direct(Context& ctx, const std::vector<Buffer>& outputs, Buffer input, int root);
void scatter_direct(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, int root);
void reduce_scatter_ring(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op);
void reduce_scatter_direct(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op);
void all_to_all_pairwise(Context& ctx, const std::vector<Buffer>& outputs, const std::vector<Buffer>& inputs);

void barrier_dissemination(Context& ctx);

// Shared-memory algorithms (need ctx.workspace(): every rank on one host). Ranks copy their data into their own
// workspace, meet at a barrier, and read each other's in place: fewer copies than passing messages and no
// chain of dependent steps, which matters most when ranks outnumber cores.
void all_reduce_shm(Context& ctx, Buffer buffer, ReduceOp op);
// Their barrier variants (one all-rank barrier per piece, three rotating parts), which the above run for small
// ops (below CTRUN_COMM_SHM_PIPELINE_BYTES) and, for all_reduce and reduce_scatter, with more ranks than cores.
void all_reduce_shm_barrier(Context& ctx, Buffer buffer, ReduceOp op);
void broadcast_shm_barrier(Context& ctx, Buffer buffer, int root);
void all_gather_shm_barrier(Context& ctx, const std::vector<Buffer>& outputs, Buffer input);
void reduce_scatter_shm_barrier(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op);
void broadcast_shm(Context& ctx, Buffer buffer, int root);
void all_gather_shm(Context& ctx, const std::vector<Buffer>& outputs, Buffer input);
void reduce_scatter_shm(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op);

// Direct shared-memory algorithms (need ctx.workspace()->peer_reads()): ranks publish their buffers' addresses and
// copy straight out of each other's buffers (process_vm_readv): one copy per byte and 2-3 barriers per op at any
// size (peer_buffers.hpp).
void all_reduce_shm_direct(Context& ctx, Buffer buffer, ReduceOp op);
void broadcast_shm_direct(Context& ctx, Buffer buffer, int root);
void all_gather_shm_direct(Context& ctx, const std::vector<Buffer>& outputs, Buffer input);
void reduce_scatter_shm_direct(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op);

}  // namespace ctrun::comm::algorithms
