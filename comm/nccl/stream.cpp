#include "comm/nccl/stream.hpp"

namespace ctrun::comm::nccl {
namespace {
thread_local cudaStream_t t_current_stream = nullptr;
}  // namespace

cudaStream_t current_stream() { return t_current_stream; }
void set_current_stream(cudaStream_t stream) { t_current_stream = stream; }

}  // namespace ctrun::comm::nccl
