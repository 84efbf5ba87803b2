#include "rendezvous/etcd/grpc_status.hpp"

namespace ctrun::rdzv::etcd {

const char* grpc_status_name(GrpcStatus status) {
  switch (status) {
    case GrpcStatus::kOk:
      return "OK";
    case GrpcStatus::kCancelled:
      return "CANCELLED";
    case GrpcStatus::kUnknown:
      return "UNKNOWN";
    case GrpcStatus::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case GrpcStatus::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case GrpcStatus::kNotFound:
      return "NOT_FOUND";
    case GrpcStatus::kAlreadyExists:
      return "ALREADY_EXISTS";
    case GrpcStatus::kPermissionDenied:
      return "PERMISSION_DENIED";
    case GrpcStatus::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case GrpcStatus::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case GrpcStatus::kAborted:
      return "ABORTED";
    case GrpcStatus::kOutOfRange:
      return "OUT_OF_RANGE";
    case GrpcStatus::kUnimplemented:
      return "UNIMPLEMENTED";
    case GrpcStatus::kInternal:
      return "INTERNAL";
    case GrpcStatus::kUnavailable:
      return "UNAVAILABLE";
    case GrpcStatus::kDataLoss:
      return "DATA_LOSS";
    case GrpcStatus::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
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
