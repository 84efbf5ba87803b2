// The collectives of the nccl backend. Single-buffer layouts (the list of outputs/inputs being consecutive views
// of one allocation, as all_gather_into / reduce_scatter_from pass them) map to one NCCL collective; scattered
// lists fall back to grouped broadcasts / reduces, which move the same bytes without a temporary buffer.
#include <string>

#include "comm/nccl/nccl_backend_impl.hpp"

namespace ctrun::comm::nccl {
namespace {

// True when views[i] starts right after views[i-1] (each `bytes` long), i.e. they tile one buffer.
bool consecutive(const std::vector<Buffer>& views, std::size_t bytes) {
  for (std::size_t i = 1; i < views.size(); ++i) {
    if (static_cast<const char*>(views[i].data()) != static_cast<const char*>(views[0].data()) + i * bytes) {
      return false;
    }
  }
  return true;
}

std::string name_of(std::string_view op, DataType dtype, std::size_t count) {
  return std::string(op) + "(" + std::string(to_string(dtype)) + " x " + std::to_string(count) + ")";
}

}  // namespace

WorkPtr NcclBackend::broadcast(Buffer buffer, int root) {
  check_device(buffer, "broadcast");
  return launch(
      name_of("broadcast", buffer.dtype(), buffer.count()),
      [&] {
        return ncclBroadcast(buffer.data(), buffer.data(), buffer.count(), to_nccl(buffer.dtype()), root, comm(),
                             stream_);
      },
      false, op_record(algorithms::OpKind::kBroadcast, buffer.dtype(), buffer.bytes()));
}

WorkPtr NcclBackend::all_reduce(Buffer buffer, ReduceOp op) {
  check_device(buffer, "all_reduce");
  const ncclRedOp_t nop = to_nccl(op);
  return launch(
      name_of("all_reduce", buffer.dtype(), buffer.count()),
      [&] {
        return ncclAllReduce(buffer.data(), buffer.data(), buffer.count(), to_nccl(buffer.dtype()), nop, comm(),
                             stream_);
      },
      false, op_record(algorithms::OpKind::kAllReduce, buffer.dtype(), buffer.bytes()));
}

WorkPtr NcclBackend::reduce(Buffer buffer, int root, ReduceOp op) {
  check_device(buffer, "reduce");
  const ncclRedOp_t nop = to_nccl(op);
  return launch(
      name_of("reduce", buffer.dtype(), buffer.count()),
      [&] {
        return ncclReduce(buffer.data(), buffer.data(), buffer.count(), to_nccl(buffer.dtype()), nop, root, comm(),
                          stream_);
      },
      false, op_record(algorithms::OpKind::kReduce, buffer.dtype(), buffer.bytes()));
}

WorkPtr NcclBackend::all_gather(std::vector<Buffer> outputs, Buffer input) {
  check_device(input, "all_gather");
  for (const auto& o : outputs) check_device(o, "all_gather");
  const ncclDataType_t dt = to_nccl(input.dtype());
  const std::size_t count = input.count();
  const std::string what = name_of("all_gather", input.dtype(), count);
  const RecordedOp rec = op_record(algorithms::OpKind::kAllGather, input.dtype(), input.bytes());
  if (consecutive(outputs, input.bytes())) {
    return launch(
        what, [&] { return ncclAllGather(input.data(), outputs[0].data(), count, dt, comm(), stream_); }, false, rec);
  }
  return launch(
      what,
      [&] {
        return run_grouped([&] {
          for (int r = 0; r < size(); ++r) {
            const void* send = r == rank() ? input.data() : outputs[static_cast<std::size_t>(r)].data();
            ncclResult_t res =
                ncclBroadcast(send, outputs[static_cast<std::size_t>(r)].data(), count, dt, r, comm(), stream_);
            if (res != ncclSuccess && res != ncclInProgress) return res;
          }
          return ncclSuccess;
        });
      },
      false, rec);
}

WorkPtr NcclBackend::reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) {
  check_device(output, "reduce_scatter");
  for (const auto& in : inputs) check_device(in, "reduce_scatter");
  const ncclDataType_t dt = to_nccl(output.dtype());
  const ncclRedOp_t nop = to_nccl(op);
  const std::size_t count = output.count();
  const std::string what = name_of("reduce_scatter", output.dtype(), count);
  const RecordedOp rec = op_record(algorithms::OpKind::kReduceScatter, output.dtype(), output.bytes());
  if (consecutive(inputs, output.bytes())) {
    return launch(
        what, [&] { return ncclReduceScatter(inputs[0].data(), output.data(), count, dt, nop, comm(), stream_); },
        false, rec);
  }
  return launch(
      what,
      [&] {
        return run_grouped([&] {
          for (int r = 0; r < size(); ++r) {
            // recvbuff is only written on the root (r == rank()).
            ncclResult_t res = ncclReduce(inputs[static_cast<std::size_t>(r)].data(), output.data(), count, dt, nop, r,
                                          comm(), stream_);
            if (res != ncclSuccess && res != ncclInProgress) return res;
          }
          return ncclSuccess;
        });
      },
      false, rec);
}

WorkPtr NcclBackend::barrier() {
  // torch's NCCL barrier: a one-element all_reduce; wait() blocks the host, which is what callers expect.
  return launch(
      "barrier",
      [&] { return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm(), stream_); },
      /*host_sync=*/true, op_record(algorithms::OpKind::kBarrier, DataType::kInt32, 4));
}

}  // namespace ctrun::comm::nccl
