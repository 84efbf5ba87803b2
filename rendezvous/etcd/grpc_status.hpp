#pragma once
// The gRPC status codes etcd reports in its gateway's error answers ({"code": 5, "message": ...}), by name.

namespace ctrun::rdzv::etcd {

enum class GrpcStatus : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// gRPC's own spelling ("NOT_FOUND"); "UNKNOWN_CODE" for a number gRPC does not define.
const char* grpc_status_name(GrpcStatus status);

// True when the code says the request itself is wrong (a missing lease, a bad argument, a refused user): another
// member would answer the same. Every other code (no leader, timeouts, an unavailable member) may pass elsewhere or
// later.
bool is_request_error(GrpcStatus status);

}  // namespace ctrun::rdzv::etcd
