#pragma once
// The collective checks shared by the collectives tests (one host: collectives_test.cpp; two levels:
// two_level_test.cpp, two_level_worker.cpp): every op x dtype x reduce op x size on one group against the
// sequential reference (reference.hpp). Each throws std::runtime_error naming the op and element that differ.

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "comm/process_group.hpp"
#include "reference.hpp"

namespace ctrun::comm::testing {

// Small chunks make the pipelined algorithms cut even the test's "large" buffers into many chunks, and a small
// workspace makes the shm algorithms cut them into pieces (set per group, through the options).
inline const std::map<std::string, std::string> kSmallChunks = {{"CTRUN_COMM_CHUNK_BYTES", "1024"},
                                                                {"CTRUN_COMM_SHM_WORKSPACE_BYTES", "4096"}};

inline constexpr std::size_t kSizes[] = {0, 1, 37, 3001};

[[noreturn]] inline void fail(const std::string& what, std::size_t i, double got, double want) {
  std::ostringstream os;
  os << what << ": element " << i << " is " << got << ", expected " << want;
  throw std::runtime_error(os.str());
}

// Checks buffer element i against `want` after rounding `want` into the dtype (int8 products wrap, etc.).
inline void expect_at(const TestBuffer& b, DataType dtype, std::size_t i, double want, const std::string& what) {
  TestBuffer w(dtype, 1);
  w.set(0, want);
  if (!close_enough(b.get(i), w.get(0), dtype)) fail(what, i, b.get(i), w.get(0));
}

inline std::string label(const char* op, DataType dtype, std::size_t count, ReduceOp rop = ReduceOp::kSum) {
  return std::string(op) + "(" + std::string(to_string(dtype)) + ", " + std::to_string(count) + ", " +
         std::string(to_string(rop)) + ")";
}

inline void check_all_reduce_and_reduce(int rank, int n, ProcessGroup& pg, int& seed) {
  for (DataType dtype : all_dtypes()) {
    for (ReduceOp op : ops_for(dtype)) {
      for (std::size_t count : kSizes) {
        ++seed;
        TestBuffer b(dtype, count);
        b.fill(rank, seed, op);
        pg.all_reduce(b.view(), op);
        for (std::size_t i = 0; i < count; ++i) {
          expect_at(b, dtype, i, reference_reduce(n, i, seed, op, dtype), label("all_reduce", dtype, count, op));
        }
        const int root = seed % n;
        b.fill(rank, seed, op);
        pg.reduce(b.view(), root, op);
        if (rank == root) {
          for (std::size_t i = 0; i < count; ++i) {
            expect_at(b, dtype, i, reference_reduce(n, i, seed, op, dtype), label("reduce", dtype, count, op));
          }
        }
      }
    }
  }
}

inline void check_reduce_scatter(int rank, int n, ProcessGroup& pg, int& seed) {
  for (DataType dtype : all_dtypes()) {
    for (ReduceOp op : ops_for(dtype)) {
      for (std::size_t count : kSizes) {
        ++seed;
        // Block j of every rank's input is element range [j*count, (j+1)*count) of one long vector.
        TestBuffer in(dtype, count * static_cast<std::size_t>(n));
        in.fill(rank, seed, op);
        TestBuffer out(dtype, count);
        if (seed % 2) {
          std::vector<Buffer> inputs;
          for (int j = 0; j < n; ++j) inputs.push_back(in.slice(static_cast<std::size_t>(j) * count, count));
          pg.reduce_scatter(out.view(), inputs, op);
        } else {
          pg.reduce_scatter_from(out.view(), in.view(), op);
        }
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t global = static_cast<std::size_t>(rank) * count + i;
          expect_at(out, dtype, i, reference_reduce(n, global, seed, op, dtype),
                    label("reduce_scatter", dtype, count, op));
        }
      }
    }
  }
}

inline void check_data_movement(int rank, int n, ProcessGroup& pg, int& seed) {
  const ReduceOp k = ReduceOp::kSum;  // value_of's plain small integers
  for (DataType dtype : all_dtypes()) {
    for (std::size_t count : kSizes) {
      ++seed;
      const int root = (seed + 1) % n;
      {  // broadcast
        TestBuffer b(dtype, count);
        if (rank == root)
          b.fill(root, seed, k);
        else
          b.fill_constant(3);
        pg.broadcast(b.view(), root);
        for (std::size_t i = 0; i < count; ++i)
          expect_at(b, dtype, i, value_of(root, i, seed, k, dtype), label("broadcast", dtype, count));
      }
      {  // all_gather, list and single-buffer forms
        TestBuffer in(dtype, count);
        in.fill(rank, seed, k);
        TestBuffer out(dtype, count * static_cast<std::size_t>(n));
        if (seed % 2) {
          std::vector<Buffer> outs;
          for (int r = 0; r < n; ++r) outs.push_back(out.slice(static_cast<std::size_t>(r) * count, count));
          pg.all_gather(outs, in.view());
        } else {
          pg.all_gather_into(out.view(), in.view());
        }
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < count; ++i) {
            expect_at(out, dtype, static_cast<std::size_t>(r) * count + i, value_of(r, i, seed, k, dtype),
                      label("all_gather", dtype, count));
          }
        }
      }
      {  // gather
        TestBuffer in(dtype, count);
        in.fill(rank, seed, k);
        TestBuffer out(dtype, count * static_cast<std::size_t>(n));
        std::vector<Buffer> outs;
        if (rank == root) {
          for (int r = 0; r < n; ++r) outs.push_back(out.slice(static_cast<std::size_t>(r) * count, count));
        }
        pg.gather(outs, in.view(), root);
        if (rank == root) {
          for (int r = 0; r < n; ++r) {
            for (std::size_t i = 0; i < count; ++i) {
              expect_at(out, dtype, static_cast<std::size_t>(r) * count + i, value_of(r, i, seed, k, dtype),
                        label("gather", dtype, count));
            }
          }
        }
      }
      {  // scatter: chunk r of the root's vector goes to rank r
        TestBuffer in(dtype, count * static_cast<std::size_t>(n));
        std::vector<Buffer> ins;
        if (rank == root) {
          for (int r = 0; r < n; ++r) {
            TestBuffer part(dtype, count);
            for (std::size_t i = 0; i < count; ++i)
              in.set(static_cast<std::size_t>(r) * count + i, value_of(r, i, seed, k, dtype));
            ins.push_back(in.slice(static_cast<std::size_t>(r) * count, count));
          }
        }
        TestBuffer out(dtype, count);
        pg.scatter(out.view(), ins, root);
        for (std::size_t i = 0; i < count; ++i)
          expect_at(out, dtype, i, value_of(rank, i, seed, k, dtype), label("scatter", dtype, count));
      }
      {  // all_to_all, equal splits: rank r's block j holds value_of(r*n+j, i)
        TestBuffer in(dtype, count * static_cast<std::size_t>(n));
        for (int j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < count; ++i)
            in.set(static_cast<std::size_t>(j) * count + i, value_of(rank * n + j, i, seed, k, dtype));
        }
        TestBuffer out(dtype, count * static_cast<std::size_t>(n));
        pg.all_to_all_single(out.view(), in.view());
        for (int j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < count; ++i) {
            expect_at(out, dtype, static_cast<std::size_t>(j) * count + i, value_of(j * n + rank, i, seed, k, dtype),
                      label("all_to_all", dtype, count));
          }
        }
      }
      {  // all_to_all, uneven splits: r sends c(r, j) elements to j
        const auto c = [&](int r, int j) { return (static_cast<std::size_t>(r + 2 * j) % 3) * (count / 2 + 1); };
        std::vector<std::size_t> in_splits;
        std::vector<std::size_t> out_splits;
        std::size_t in_total = 0;
        std::size_t out_total = 0;
        for (int j = 0; j < n; ++j) {
          in_splits.push_back(c(rank, j));
          out_splits.push_back(c(j, rank));
          in_total += c(rank, j);
          out_total += c(j, rank);
        }
        TestBuffer in(dtype, in_total);
        std::size_t off = 0;
        for (int j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < c(rank, j); ++i) in.set(off + i, value_of(rank * n + j, i, seed, k, dtype));
          off += c(rank, j);
        }
        TestBuffer out(dtype, out_total);
        pg.all_to_all_single(out.view(), in.view(), out_splits, in_splits);
        off = 0;
        for (int j = 0; j < n; ++j) {
          for (std::size_t i = 0; i < c(j, rank); ++i) {
            expect_at(out, dtype, off + i, value_of(j * n + rank, i, seed, k, dtype),
                      label("all_to_all uneven", dtype, count));
          }
          off += c(j, rank);
        }
      }
    }
  }
}

inline void check_point_to_point(int rank, int n, ProcessGroup& pg, int& seed) {
  pg.barrier();
  if (n == 1) return;
  const int right = (rank + 1) % n;
  const int left = (rank + n - 1) % n;
  for (std::size_t count : kSizes) {
    ++seed;
    // A ring exchange with isend/irecv (would deadlock with blocking calls) on two tags, in opposite order.
    TestBuffer a(DataType::kInt32, count);
    TestBuffer b(DataType::kInt32, count);
    a.fill(rank, seed, ReduceOp::kSum);
    b.fill(rank, seed + 1, ReduceOp::kSum);
    TestBuffer ra(DataType::kInt32, count);
    TestBuffer rb(DataType::kInt32, count);
    auto w1 = pg.irecv(rb.view(), left, 2);
    auto w2 = pg.irecv(ra.view(), left, 1);
    auto w3 = pg.isend(a.view(), right, 1);
    auto w4 = pg.isend(b.view(), right, 2);
    for (auto& w : {w1, w2, w3, w4}) w->wait();
    for (std::size_t i = 0; i < count; ++i) {
      expect_at(ra, DataType::kInt32, i, value_of(left, i, seed, ReduceOp::kSum, DataType::kInt32),
                "isend/irecv tag 1");
      expect_at(rb, DataType::kInt32, i, value_of(left, i, seed + 1, ReduceOp::kSum, DataType::kInt32),
                "isend/irecv tag 2");
    }
    // The same through batch_isend_irecv, both directions at once.
    TestBuffer from_left(DataType::kInt32, count);
    TestBuffer from_right(DataType::kInt32, count);
    pg.batch_isend_irecv({P2POp::send(a.view(), right, 3), P2POp::send(a.view(), left, 3),
                          P2POp::recv(from_left.view(), left, 3), P2POp::recv(from_right.view(), right, 3)})
        ->wait();
    for (std::size_t i = 0; i < count; ++i) {
      expect_at(from_left, DataType::kInt32, i, value_of(left, i, seed, ReduceOp::kSum, DataType::kInt32),
                "batch from left");
      expect_at(from_right, DataType::kInt32, i, value_of(right, i, seed, ReduceOp::kSum, DataType::kInt32),
                "batch from right");
    }
  }
  // Blocking send/recv chain 0 -> 1 -> ... -> n-1, each hop adding one.
  std::vector<std::int64_t> v(5, 0);
  if (rank > 0) pg.recv(v, rank - 1, 7);
  for (auto& x : v) x += 1;
  if (rank < n - 1) pg.send(v, rank + 1, 7);
  if (v[4] != rank + 1) fail("send/recv chain", 4, static_cast<double>(v[4]), rank + 1);
}

}  // namespace ctrun::comm::testing
