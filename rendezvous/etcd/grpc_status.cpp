#include "rendezvous/etcd/grpc_status.hpp"

#include <cstddef>
#include <iterator>

namespace ctrun::rdzv::etcd {

const char* grpc_status_name(GrpcStatus status) {
  // Indexed by code: gRPC numbers its codes 0 to 16 without gaps.
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  static_assert(std::size(kNames) == static_cast<std::size_t>(GrpcStatus::kUnauthenticated) + 1);
  const auto code = static_cast<std::size_t>(status);
  return code < std::size(kNames) ? kNames[code] : "UNKNOWN_CODE";
}

bool is_request_error(GrpcStatus status) {
  switch (status) {
    case GrpcStatus::kInvalidArgument:
    case GrpcStatus::kNotFound:
    case GrpcStatus::kAlreadyExists:
    case GrpcStatus::kPermissionDenied:
    case GrpcStatus::kFailedPrecondition:
    case GrpcStatus::kOutOfRange:
    case GrpcStatus::kUnauthenticated:
      return true;
    default:
      return false;
  }
}

}  // namespace ctrun::rdzv::etcd
