#include "raw_nccl.hpp"

#include <stdexcept>

namespace ctrun::bench {
namespace {
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

RawNccl::RawNccl(int rank, int size, const ncclUniqueId& id, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
}

RawNccl::~RawNccl() {
  ncclCommDestroy(comm_);
  cudaStreamDestroy(stream_);
}

void RawNccl::enqueue(const std::string& op, void* a, void* b, std::size_t count) {
  if (op == "all_reduce") {
    check(ncclAllReduce(a, a, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  } else if (op == "broadcast") {
    check(ncclBroadcast(a, a, count, ncclFloat32, 0, comm_, stream_), "ncclBroadcast");
  } else if (op == "reduce") {
    check(ncclReduce(a, a, count, ncclFloat32, ncclSum, 0, comm_, stream_), "ncclReduce");
  } else if (op == "all_gather") {
    check(ncclAllGather(a, b, count, ncclFloat32, comm_, stream_), "ncclAllGather");
  } else if (op == "reduce_scatter") {
    check(ncclReduceScatter(a, b, count, ncclFloat32, ncclSum, comm_, stream_), "ncclReduceScatter");
  } else {
    throw std::invalid_argument("unknown op " + op);
  }
}

void RawNccl::synchronize() { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

}  // namespace ctrun::bench
