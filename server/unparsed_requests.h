// UnparsedRequests: a server interceptor for requests gRPC could not parse
// into the method's request message (bytes that are not protobuf, or a
// string field holding bytes that are not UTF-8, which proto3 refuses).
// gRPC answers those INTERNAL with an empty message before any handler
// runs (UNIMPLEMENTED with an empty message for the methods served on the
// callback API), which reads as a server fault or a missing method and
// invites retries; this turns the answer into INVALID_ARGUMENT naming the
// method and what was wrong, with no field to name (the request never
// became a message). Thread-safe.
#ifndef TRAINYARD_SERVER_UNPARSED_REQUESTS_H_
#define TRAINYARD_SERVER_UNPARSED_REQUESTS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <vector>

namespace trainyard::server {

class UnparsedRequestsFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

// The interceptor creators to give ServerBuilder (experimental()
// .SetInterceptorCreators).
std::vector<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
UnparsedRequestsInterceptors();

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_UNPARSED_REQUESTS_H_
