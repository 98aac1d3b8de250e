// InProcessServer: fake gRPC services served on 127.0.0.1:0 in the test
// process, with a JobClient connected to them, for the client's tests.
// Construct it in SetUp; a failure to start fails the test and leaves
// client() null.
#ifndef TRAINYARD_CLIENT_IN_PROCESS_SERVER_TEST_SUPPORT_H_
#define TRAINYARD_CLIENT_IN_PROCESS_SERVER_TEST_SUPPORT_H_

#include <grpcpp/grpcpp.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/job_client.h"
#include "gtest/gtest.h"

namespace trainyard::client {

class InProcessServer {
 public:
  // Serves `services` and connects a client with `options` (its server
  // address is filled in).
  InProcessServer(std::initializer_list<grpc::Service*> services,
                  ClientOptions options = {}) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    for (grpc::Service* service : services) builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr) << "the fake server did not start";
    if (server_ == nullptr) return;
    options.server = address();
    absl::StatusOr<std::unique_ptr<JobClient>> client =
        JobClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (client.ok()) client_ = std::move(*client);
  }
  ~InProcessServer() { Shutdown(); }
  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;

  JobClient* client() const { return client_.get(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  void Shutdown() {
    if (server_ != nullptr) server_->Shutdown();
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<JobClient> client_;
};

// A fixture whose tests talk to fake services: Serve() them from SetUp;
// they stop after each test.
class InProcessServerTest : public ::testing::Test {
 protected:
  // Serves `services` and connects client_ with `options`; a failure fails
  // the test (which then does not run) and leaves client_ null.
  void Serve(std::initializer_list<grpc::Service*> services,
             ClientOptions options = {}) {
    server_ = std::make_unique<InProcessServer>(services, std::move(options));
    client_ = server_->client();
    ASSERT_NE(client_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<InProcessServer> server_;
  JobClient* client_ = nullptr;
};

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_IN_PROCESS_SERVER_TEST_SUPPORT_H_
