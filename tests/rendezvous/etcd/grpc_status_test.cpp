// gRPC status codes by name, and which of them say that the request itself is wrong.
#include "rendezvous/etcd/grpc_status.hpp"

#include <gtest/gtest.h>

#include <string>

using ctrun::rdzv::etcd::GrpcStatus;

TEST(GrpcStatus, NamesAsGrpcSpellsThem) {
  EXPECT_EQ(std::string(grpc_status_name(GrpcStatus::kOk)), "OK");
  EXPECT_EQ(std::string(grpc_status_name(GrpcStatus::kNotFound)), "NOT_FOUND");
  EXPECT_EQ(std::string(grpc_status_name(GrpcStatus::kUnavailable)), "UNAVAILABLE");
  EXPECT_EQ(std::string(grpc_status_name(GrpcStatus::kUnauthenticated)), "UNAUTHENTICATED");
  EXPECT_EQ(std::string(grpc_status_name(static_cast<GrpcStatus>(99))), "UNKNOWN_CODE");
}

TEST(GrpcStatus, RequestErrorsAreThoseAnotherMemberWouldRepeat) {
  for (auto code :
       {GrpcStatus::kInvalidArgument, GrpcStatus::kNotFound, GrpcStatus::kAlreadyExists, GrpcStatus::kPermissionDenied,
        GrpcStatus::kFailedPrecondition, GrpcStatus::kOutOfRange, GrpcStatus::kUnauthenticated})
    EXPECT_TRUE(is_request_error(code)) << grpc_status_name(code);
  for (auto code : {GrpcStatus::kOk, GrpcStatus::kUnknown, GrpcStatus::kDeadlineExceeded, GrpcStatus::kUnavailable,
                    GrpcStatus::kInternal, GrpcStatus::kResourceExhausted, static_cast<GrpcStatus>(99)})
    EXPECT_FALSE(is_request_error(code)) << grpc_status_name(code);
}
