#pragma once
// The two kinds of failure of an etcd request: etcd refused the request itself (EtcdError, final), or this try
// failed on its way (TransientError: a lost connection, no leader, a timeout), so another member may answer.

#include <stdexcept>
#include <string>

#include "rendezvous/etcd/grpc_status.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

class EtcdError : public store::StoreError {
 public:
  EtcdError(GrpcStatus code, const std::string& message) : store::StoreError(message), code_(code) {}
  GrpcStatus code() const { return code_; }

 private:
  GrpcStatus code_;
};

// Caught by the failover (endpoint_failover.hpp), which tries the next member; never reaches the client's callers.
class TransientError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ctrun::rdzv::etcd
