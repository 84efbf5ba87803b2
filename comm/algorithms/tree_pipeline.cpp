#include "comm/algorithms/tree_pipeline.hpp"

#include <algorithm>

#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void pipelined_tree_all_reduce(Context& ctx, std::span<const TreeRegion> trees, ReduceOp op) {
  if (ctx.size() == 1 || trees.empty()) return;
  const std::size_t esize = element_size(trees[0].region.dtype());
  const std::size_t per_chunk = chunk_elements(ctx.chunk_bytes(), esize);
  struct State {
    std::size_t chunks = 0;
    char* data = nullptr;
    char* staged[2] = {nullptr, nullptr};  // what the children send up
    std::vector<RequestPtr> up[2];
    std::vector<RequestPtr> down;
  };
  std::vector<State> st(trees.size());
  std::size_t max_chunks = 0;
  for (std::size_t t = 0; t < trees.size(); ++t) {
    const std::size_t count = trees[t].region.count();
    st[t].chunks = (count + per_chunk - 1) / per_chunk;
    st[t].data = static_cast<char*>(trees[t].region.data());
    for (int k = 0; k < 2; ++k) {
      if (trees[t].node.children[k] >= 0) st[t].staged[k] = ctx.scratch(count * esize, static_cast<int>(1 + 2 * t) + k);
    }
    max_chunks = std::max(max_chunks, st[t].chunks);
  }
  const auto chunk = [&](std::size_t t, std::size_t c) {
    const std::size_t begin = c * per_chunk;
    return Span{begin, std::min(per_chunk, trees[t].region.count() - begin)};
  };
  // Every receive up front, in the order the peers send (see the header).
  for (std::size_t c = 0; c < max_chunks; ++c) {
    for (std::size_t t = 0; t < trees.size(); ++t) {
      if (c >= st[t].chunks) continue;
      const Span s = chunk(t, c);
      for (int k = 0; k < 2; ++k) {
        if (const int child = trees[t].node.children[k]; child >= 0) {
          st[t].up[k].push_back(ctx.irecv(child, st[t].staged[k] + s.begin * esize, s.count * esize));
        }
      }
    }
  }
  for (std::size_t c = 0; c < max_chunks; ++c) {
    for (std::size_t t = 0; t < trees.size(); ++t) {
      if (c >= st[t].chunks || trees[t].node.parent < 0) continue;
      const Span s = chunk(t, c);
      st[t].down.push_back(ctx.irecv(trees[t].node.parent, st[t].data + s.begin * esize, s.count * esize));
    }
  }
  std::vector<RequestPtr> sends;
  const DataType dtype = trees[0].region.dtype();
  for (std::size_t c = 0; c < max_chunks; ++c) {  // up
    for (std::size_t t = 0; t < trees.size(); ++t) {
      if (c >= st[t].chunks) continue;
      const Span s = chunk(t, c);
      char* at = st[t].data + s.begin * esize;
      for (int k = 0; k < 2; ++k) {
        if (st[t].staged[k]) {
          ctx.wait(st[t].up[k][c]);
          reduce::reduce_into(dtype, op, at, st[t].staged[k] + s.begin * esize, s.count);
        }
      }
      if (trees[t].node.parent >= 0) sends.push_back(ctx.isend(trees[t].node.parent, at, s.count * esize));
    }
  }
  for (std::size_t c = 0; c < max_chunks; ++c) {  // down
    for (std::size_t t = 0; t < trees.size(); ++t) {
      if (c >= st[t].chunks) continue;
      const Span s = chunk(t, c);
      char* at = st[t].data + s.begin * esize;
      if (trees[t].node.parent >= 0) ctx.wait(st[t].down[c]);
      for (int child : trees[t].node.children) {
        if (child >= 0) sends.push_back(ctx.isend(child, at, s.count * esize));
      }
    }
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
