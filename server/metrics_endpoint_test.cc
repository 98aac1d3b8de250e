// The /metrics endpoint and its wiring: MetricsEndpoint's address rules,
// port 0 and address file, a clear error on a taken port; yard-server's
// --metrics-listen and --health-listen flags; a YardServer scraped over real
// HTTP and probed over the health-only gRPC port.
#include "server/metrics_endpoint.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_flags.h"
#include "server/yard_server.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

// GET /metrics from "127.0.0.1:PORT"; the whole response, or "" on error.
std::string Scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port)) return "";
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MetricsEndpointTest, RefusesNonLoopbackAndMalformedAddresses) {
  for (const char* bad : {"0.0.0.0:9470", "10.1.2.3:1", "example.com:80"}) {
    absl::Status s = CheckMetricsListen(bad, "--metrics-listen");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("only loopback")) << bad;
  }
  for (const char* bad : {"127.0.0.1", ":9470", "127.0.0.1:x",
                          "127.0.0.1:70000", "127.0.0.1:-1"}) {
    absl::Status s = CheckMetricsListen(bad, "--metrics-listen");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("expected HOST:PORT")) << bad;
  }
  EXPECT_TRUE(CheckMetricsListen("127.0.0.1:0", "--x").ok());
  EXPECT_TRUE(CheckMetricsListen("localhost:9470", "--x").ok());
}

TEST(MetricsEndpointTest, PortZeroServesAndNamesTheAddress) {
  TestDir dir;
  auto registry = std::make_shared<prometheus::Registry>();
  auto endpoint = MetricsEndpoint::Start({.listen = "localhost:0",
                                          .flag_name = "--metrics-listen",
                                          .address_file = dir.File("m.addr")},
                                         registry);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ(ReadFile(dir.File("m.addr")), (*endpoint)->address() + "\n");
  EXPECT_THAT(Scrape((*endpoint)->address()), HasSubstr("200 OK"));

  // A second endpoint on the same port: a clear error, no exception.
  auto second = MetricsEndpoint::Start({.listen = (*endpoint)->address(),
                                        .flag_name = "--metrics-listen",
                                        .address_file = ""},
                                       registry);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen"));

  endpoint->reset();
  EXPECT_EQ(ReadFile(dir.File("m.addr")), "");  // removed when stopped
}

TEST(MetricsEndpointTest, ServerFlags) {
  auto cl = ParseServerFlags({"--state-dir", "/tmp/x"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.metrics_listen, "127.0.0.1:9470");
  EXPECT_EQ(cl->options.health_listen, "");
  cl = ParseServerFlags({"--state-dir", "/tmp/x", "--metrics-listen="});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.metrics_listen, "");  // off
  cl = ParseServerFlags(
      {"--state-dir", "/tmp/x", "--metrics-listen", "0.0.0.0:9470"});
  EXPECT_THAT(cl.status().message(), HasSubstr("--metrics-listen 0.0.0.0"));
  cl = ParseServerFlags(
      {"--state-dir", "/tmp/x", "--health-listen", "0.0.0.0:7071"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.health_listen, "0.0.0.0:7071");
}

// grpc.health.v1.Health/Check for the whole server: the raw response bytes.
grpc::Status HealthCheck(const std::string& address, std::string* response) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Slice empty("");  // an empty HealthCheckRequest
  grpc::ByteBuffer request(&empty, 1), reply;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &reply, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  std::vector<grpc::Slice> slices;
  if (status.ok() && reply.Dump(&slices).ok()) {
    for (auto& s : slices) response->append(s.begin(), s.end());
  }
  return status;
}

TEST(MetricsEndpointTest, YardServerServesMetricsAndHealthPorts) {
  TestDir dir;
  YardServerOptions o;
  o.listen = "127.0.0.1:0";
  o.state_dir = dir.path();
  o.metrics_listen = "127.0.0.1:0";
  o.health_listen = "127.0.0.1:0";
  auto server = YardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string metrics = (*server)->metrics_address();
  EXPECT_EQ(ReadFile(dir.File("yard-server.metrics-addr")), metrics + "\n");
  const std::string text = Scrape(metrics);
  EXPECT_THAT(text, HasSubstr("yard_jobs{state=\"queued\"} 0"));
  EXPECT_THAT(text, HasSubstr("yard_build_info{version=\""));
  EXPECT_THAT(text, HasSubstr("yard_scheduling_pass_duration_seconds_count"));

  const std::string health = ReadFile(dir.File("yard-server.health-addr"));
  ASSERT_FALSE(health.empty());
  std::string reply;
  grpc::Status s = HealthCheck(health.substr(0, health.size() - 1), &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, std::string("\x08\x01", 2));  // status: SERVING
  // Only health lives there: the job API is not served on that port.
  std::string none;
  auto channel = grpc::CreateChannel(health.substr(0, health.size() - 1),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status jobs;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/trainyard.v1.JobService/ListJobs", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status st) {
                   jobs = std::move(st);
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(jobs.error_code(), grpc::StatusCode::UNIMPLEMENTED);

  (*server)->Shutdown();
  EXPECT_EQ(ReadFile(dir.File("yard-server.metrics-addr")), "");
  EXPECT_EQ(ReadFile(dir.File("yard-server.health-addr")), "");
}

// During --drain-ms the health-only port (the one Kubernetes probes) stays
// open and answers NOT_SERVING, as the API port does; then it closes.
TEST(MetricsEndpointTest, HealthPortSaysNotServingThroughTheDrain) {
  TestDir dir;
  YardServerOptions o;
  o.listen = "127.0.0.1:0";
  o.state_dir = dir.path();
  o.health_listen = "127.0.0.1:0";
  o.drain = absl::Seconds(3);
  auto server = YardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string health = ReadFile(dir.File("yard-server.health-addr"));
  health.pop_back();
  std::thread stopper([&] { (*server)->Shutdown(); });
  absl::SleepFor(absl::Milliseconds(500));
  std::string reply;
  grpc::Status during = HealthCheck(health, &reply);
  stopper.join();
  ASSERT_TRUE(during.ok()) << during.error_message();
  EXPECT_EQ(reply, std::string("\x08\x02", 2));  // status: NOT_SERVING
  reply.clear();
  EXPECT_FALSE(HealthCheck(health, &reply).ok()) << "closed after the drain";
}

// A side port in use stops the start before anything is stored: no job
// store, no tokens, no API port a worker could reach; the reason names the
// flag.
TEST(MetricsEndpointTest, ATakenSidePortStopsTheStartBeforeTheStoreOpens) {
  TestDir dir;
  YardServerOptions first;
  first.listen = "127.0.0.1:0";
  first.state_dir = dir.File("first");
  first.metrics_listen = "127.0.0.1:0";
  first.health_listen = "127.0.0.1:0";
  auto server = YardServer::Start(first);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string health = ReadFile(dir.File("first/yard-server.health-addr"));
  health.pop_back();
  for (const bool metrics_port : {true, false}) {
    SCOPED_TRACE(metrics_port ? "--metrics-listen" : "--health-listen");
    YardServerOptions o;
    o.listen = "127.0.0.1:0";
    o.state_dir = dir.File(metrics_port ? "m" : "h");
    (metrics_port ? o.metrics_listen : o.health_listen) =
        metrics_port ? (*server)->metrics_address() : health;
    auto second = YardServer::Start(o);
    ASSERT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(
        second.status().message(),
        HasSubstr(metrics_port ? "--metrics-listen" : "--health-listen"));
    for (const char* file :
         {"trainyard.db", "auth.db", "admin.token", "yard-server.addr"}) {
      EXPECT_FALSE(std::filesystem::exists(o.state_dir + "/" + file)) << file;
    }
  }
}

TEST(MetricsEndpointTest, MetricsOffByDefaultInTheLibrary) {
  TestDir dir;
  YardServerOptions o;
  o.listen = "127.0.0.1:0";
  o.state_dir = dir.path();
  auto server = YardServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_address(), "");
}

}  // namespace
}  // namespace trainyard::server
