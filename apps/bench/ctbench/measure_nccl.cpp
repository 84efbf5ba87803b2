// Compiled only in CUDA builds (see CMakeLists.txt); the nccl backend owns this file.
#include "measure_nccl.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <stdexcept>
#include <vector>

#include "comm/nccl/device_memory.hpp"
#include "comm/nccl/nccl_backend.hpp"

namespace ctrun::bench {

Row measure_nccl(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int iters, int warmup) {
  using comm::DataType;
  using comm::nccl::DeviceBuffer;
  const int n = pg.size();
  const std::size_t count = std::max<std::size_t>(bytes / 4, 1);
  const std::size_t per_rank = std::max<std::size_t>(count / static_cast<std::size_t>(n), 1);
  const std::size_t total = per_rank * static_cast<std::size_t>(n);
  const bool gathers = op == "all_gather" || op == "reduce_scatter";
  // The backend chose the group's device (CTRUN_COMM_DEVICE / LOCAL_RANK rule): the buffers must live there.
  const int group_device = comm::nccl::device_of(pg.backend());
  cudaSetDevice(group_device);  // the synchronisations below are per device
  DeviceBuffer a((gathers ? total : count) * 4, group_device);
  DeviceBuffer b((gathers ? total : count) * 4, group_device);
  auto run_once = [&] {
    if (op == "all_reduce") {
      pg.all_reduce(a.view(DataType::kFloat32, count));
    } else if (op == "broadcast") {
      pg.broadcast(a.view(DataType::kFloat32, count), 0);
    } else if (op == "reduce") {
      pg.reduce(a.view(DataType::kFloat32, count), 0);
    } else if (op == "all_gather") {
      pg.all_gather_into(b.view(DataType::kFloat32, total), a.view(DataType::kFloat32, per_rank));
    } else if (op == "reduce_scatter") {
      pg.reduce_scatter_from(b.view(DataType::kFloat32, per_rank), a.view(DataType::kFloat32, total));
    } else {
      throw std::invalid_argument("unknown op " + op);
    }
  };
  for (int i = 0; i < warmup; ++i) run_once();
  pg.barrier();  // host-synchronising in the nccl backend
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run_once();
  cudaDeviceSynchronize();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  DeviceBuffer slowest_dev = DeviceBuffer::from(std::vector<double>{us}, group_device);
  pg.all_reduce(slowest_dev.view(DataType::kFloat64, 1), comm::ReduceOp::kMax);
  cudaDeviceSynchronize();
  Row row;
  row.op = op;
  row.bytes = gathers ? total * 4 : count * 4;
  row.time_us = slowest_dev.to_vector<double>(1)[0];
  row.algbw = static_cast<double>(row.bytes) / (row.time_us * 1e-6) / 1e9;
  row.busbw = row.algbw * bus_factor(op, n);
  return row;
}

}  // namespace ctrun::bench
