// Conversion between absl::Status (the libraries' currency) and grpc::Status
// (the wire's). Only the thin gRPC layers (server/, worker/, client/) use it.
// A status's payloads (e.g. the google.rpc.BadRequest of
// common/field_errors.h) travel as the details of gRPC's rich error model:
// a google.rpc.Status in the grpc-status-details-bin trailer.
#ifndef TRAINYARD_COMMON_RPC_STATUS_H_
#define TRAINYARD_COMMON_RPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "google/rpc/status.pb.h"

namespace trainyard {

// Details beyond this many bytes are left out: with the message they must
// fit gRPC's default 8 KiB limit on a response's metadata.
inline constexpr size_t kMaxStatusDetailsBytes = 4096;

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(s.code());
  google::rpc::Status details;
  s.ForEachPayload([&](absl::string_view type_url, const absl::Cord& payload) {
    google::protobuf::Any* any = details.add_details();
    any->set_type_url(std::string(type_url));
    any->set_value(std::string(payload));
  });
  if (details.details_size() == 0) {
    return grpc::Status(code, std::string(s.message()));
  }
  details.set_code(static_cast<int32_t>(code));
  details.set_message(std::string(s.message()));
  std::string wire = details.SerializeAsString();
  if (wire.size() + s.message().size() > kMaxStatusDetailsBytes) wire.clear();
  return grpc::Status(code, std::string(s.message()), wire);
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
  google::rpc::Status details;
  if (!s.error_details().empty() &&
      details.ParseFromString(s.error_details())) {
    for (const google::protobuf::Any& any : details.details()) {
      status.SetPayload(any.type_url(), absl::Cord(any.value()));
    }
  }
  return status;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_RPC_STATUS_H_
