#include "server/unparsed_requests.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc_handoffs.h"
#include "google/protobuf/descriptor.h"

namespace trainyard::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Whether gRPC path `method` ("/package.Service/Method") is a method of
// the services compiled in (all of which the server implements).
bool IsKnownMethod(const std::string& method) {
  std::string full = method.substr(method.empty() ? 0 : 1);
  std::replace(full.begin(), full.end(), '/', '.');
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
             full) != nullptr;
}

class UnparsedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsedRequestInterceptor(const char* method)
      : method_(method), known_(IsKnownMethod(method_)) {
    handoffs_.Handing(GrpcHandoffs::kReturn);
  }
  ~UnparsedRequestInterceptor() override { handoffs_.Done(); }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    // gRPC runs the hooks after making the interceptor, and deletes it
    // after them all. (The reaction's end, after Proceed, reads no memory
    // of the interceptor, which may be gone by then.)
    GrpcHandoffs::Reaction reaction(&handoffs_, GrpcHandoffs::kReturn);
    // Only gRPC's objects, and this object's fields (set as it was made),
    // are touched here: ThreadSanitizer leaves these accesses out.
    const GrpcObjectsOnlyScope grpc_objects;
    // A request that failed to parse reaches the interceptors as no
    // message at all; a stream's end does too, so the status decides. (A
    // stream's reads and its status may come from different threads.)
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      no_message_.store(true, std::memory_order_relaxed);
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // gRPC's words for a request it could not parse, or for none at all:
      // on a synchronous method, INTERNAL after no message was received;
      // on a callback method, UNIMPLEMENTED for a method we implement.
      const bool sync_unparsed =
          no_message_.load(std::memory_order_relaxed) &&
          status.error_code() == grpc::StatusCode::INTERNAL &&
          (status.error_message().empty() ||
           status.error_message() == "No payload");
      const bool callback_unparsed =
          known_ && status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty();
      if (sync_unparsed || callback_unparsed) {
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
  const bool known_;
  std::atomic<bool> no_message_{false};
  GrpcHandoffs handoffs_;
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
