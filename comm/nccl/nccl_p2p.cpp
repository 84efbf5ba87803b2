// Point-to-point and the ops built from it (gather, scatter, all_to_all): grouped ncclSend/ncclRecv, so every
// pattern completes without deadlock; this rank's own block is a device-to-device copy on the group's stream.
// NCCL has no tags: sends and receives between two ranks match in issue order, whatever their tags (as with
// torch's NCCL backend).
#include <string>

#include "comm/nccl/nccl_backend_impl.hpp"

namespace ctrun::comm::nccl {
namespace {

inline ncclResult_t keep_first(ncclResult_t so_far, ncclResult_t next) {
  return so_far != ncclSuccess && so_far != ncclInProgress ? so_far : next;
}

}  // namespace

WorkPtr NcclBackend::send(Buffer buffer, int dst, int /*tag*/) {
  check_device(buffer, "send");
  return launch("send(to " + std::to_string(dst) + ")",
                [&] { return ncclSend(buffer.data(), buffer.count(), to_nccl(buffer.dtype()), dst, comm(), stream_); });
}

WorkPtr NcclBackend::recv(Buffer buffer, int src, int /*tag*/) {
  check_device(buffer, "recv");
  return launch("recv(from " + std::to_string(src) + ")",
                [&] { return ncclRecv(buffer.data(), buffer.count(), to_nccl(buffer.dtype()), src, comm(), stream_); });
}

WorkPtr NcclBackend::batch_p2p(std::vector<P2POp> ops) {
  for (const auto& op : ops) check_device(op.buffer, "batch_isend_irecv");
  return launch("batch_isend_irecv(" + std::to_string(ops.size()) + " ops)", [&] {
    return run_grouped([&] {
      ncclResult_t r = ncclSuccess;
      for (const auto& op : ops) {
        const auto dt = to_nccl(op.buffer.dtype());
        r = keep_first(r, op.kind == P2POp::Kind::kSend
                              ? ncclSend(op.buffer.data(), op.buffer.count(), dt, op.peer, comm(), stream_)
                              : ncclRecv(op.buffer.data(), op.buffer.count(), dt, op.peer, comm(), stream_));
      }
      return r;
    });
  });
}

WorkPtr NcclBackend::gather(std::vector<Buffer> outputs, Buffer input, int root) {
  check_device(input, "gather");
  for (const auto& o : outputs) check_device(o, "gather");
  const auto dt = to_nccl(input.dtype());
  return launch(
      "gather(root " + std::to_string(root) + ")",
      [&] {
        if (rank() == root) copy_on_stream(outputs[static_cast<std::size_t>(root)].data(), input.data(), input.bytes());
        return run_grouped([&] {
          if (rank() != root) return ncclSend(input.data(), input.count(), dt, root, comm(), stream_);
          ncclResult_t r = ncclSuccess;
          for (int p = 0; p < size(); ++p) {
            if (p != root)
              r = keep_first(
                  r, ncclRecv(outputs[static_cast<std::size_t>(p)].data(), input.count(), dt, p, comm(), stream_));
          }
          return r;
        });
      },
      false, op_record(algorithms::OpKind::kGather, input.dtype(), input.bytes()));
}

WorkPtr NcclBackend::scatter(Buffer output, std::vector<Buffer> inputs, int root) {
  check_device(output, "scatter");
  for (const auto& in : inputs) check_device(in, "scatter");
  const auto dt = to_nccl(output.dtype());
  return launch(
      "scatter(root " + std::to_string(root) + ")",
      [&] {
        if (rank() == root)
          copy_on_stream(output.data(), inputs[static_cast<std::size_t>(root)].data(), output.bytes());
        return run_grouped([&] {
          if (rank() != root) return ncclRecv(output.data(), output.count(), dt, root, comm(), stream_);
          ncclResult_t r = ncclSuccess;
          for (int p = 0; p < size(); ++p) {
            if (p != root)
              r = keep_first(
                  r, ncclSend(inputs[static_cast<std::size_t>(p)].data(), output.count(), dt, p, comm(), stream_));
          }
          return r;
        });
      },
      false, op_record(algorithms::OpKind::kScatter, output.dtype(), output.bytes()));
}

WorkPtr NcclBackend::all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) {
  for (const auto& o : outputs) check_device(o, "all_to_all");
  for (const auto& in : inputs) check_device(in, "all_to_all");
  const auto self = static_cast<std::size_t>(rank());
  return launch(
      "all_to_all",
      [&] {
        copy_on_stream(outputs[self].data(), inputs[self].data(), inputs[self].bytes());
        return run_grouped([&] {
          ncclResult_t r = ncclSuccess;
          for (std::size_t p = 0; p < outputs.size(); ++p) {
            if (p == self) continue;
            // Uneven splits: an empty block is skipped on both sides (the counts agree pairwise).
            if (!inputs[p].empty()) {
              r = keep_first(r, ncclSend(inputs[p].data(), inputs[p].count(), to_nccl(inputs[p].dtype()),
                                         static_cast<int>(p), comm(), stream_));
            }
            if (!outputs[p].empty()) {
              r = keep_first(r, ncclRecv(outputs[p].data(), outputs[p].count(), to_nccl(outputs[p].dtype()),
                                         static_cast<int>(p), comm(), stream_));
            }
          }
          return r;
        });
      },
      false, op_record(algorithms::OpKind::kAllToAll, inputs.empty() ? DataType::kFloat32 : inputs[0].dtype(), 0));
}

}  // namespace ctrun::comm::nccl
