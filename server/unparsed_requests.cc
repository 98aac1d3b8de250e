#include "server/unparsed_requests.h"

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"

namespace trainyard::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class UnparsedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsedRequestInterceptor(const char* method) : method_(method) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    // A request that failed to parse reaches the interceptors as no
    // message at all; a stream's end does too, so the status decides. (A
    // stream's reads and its status may come from different threads.)
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      no_message_.store(true, std::memory_order_relaxed);
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS) &&
        no_message_.load(std::memory_order_relaxed)) {
      const grpc::Status status = methods->GetSendStatus();
      // gRPC's words for a request it could not parse, or for none at all.
      if (status.error_code() == grpc::StatusCode::INTERNAL &&
          (status.error_message().empty() ||
           status.error_message() == "No payload")) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("the request to ", method_,
                         " could not be parsed: it is not the method's "
                         "request message in protobuf, or one of its string "
                         "fields holds bytes that are not valid UTF-8")));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  std::atomic<bool> no_message_{false};
};

}  // namespace

grpc::experimental::Interceptor* UnparsedRequestsFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new UnparsedRequestInterceptor(info->method());
}

std::vector<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
UnparsedRequestsInterceptors() {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      out;
  out.push_back(std::make_unique<UnparsedRequestsFactory>());
  return out;
}

}  // namespace trainyard::server
