#include "common/grpc_log.h"

#include <grpc/support/log.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(RepeatFilterTest, ShowsTheFirstLineThenOneAWindowCountingTheRest) {
  RepeatFilter filter(absl::Minutes(1));
  int64_t held = -1;
  EXPECT_TRUE(filter.Show("a.cc:1", kStart, &held));
  EXPECT_EQ(held, 0);
  // A retry a second for 59 seconds: all held back.
  for (int s = 1; s < 60; ++s) {
    EXPECT_FALSE(filter.Show("a.cc:1", kStart + absl::Seconds(s), &held)) << s;
  }
  // Another place in the source is not held back by the first.
  EXPECT_TRUE(filter.Show("b.cc:7", kStart + absl::Seconds(30), &held));
  EXPECT_EQ(held, 0);
  // A minute after the last line shown: shown, with the count.
  EXPECT_TRUE(filter.Show("a.cc:1", kStart + absl::Seconds(60), &held));
  EXPECT_EQ(held, 59);
  EXPECT_FALSE(filter.Show("a.cc:1", kStart + absl::Seconds(61), &held));
  EXPECT_TRUE(filter.Show("a.cc:1", kStart + absl::Seconds(200), &held));
  EXPECT_EQ(held, 1);
}

// gRPC's log lines come out in trainyard's format, repeats from one place
// held back: ten handshake failures in a row make one line.
TEST(RouteGrpcLogsTest, WritesGrpcLinesInOurFormatAndHoldsBackRepeats) {
  unsetenv("GRPC_VERBOSITY");
  gpr_log_verbosity_init();  // as grpc_init does: gRPC errors are shown
  RouteGrpcLogs();
  testing::internal::CaptureStderr();
  for (int i = 0; i < 10; ++i) {
    gpr_log("ssl_transport_security.cc", 1501, GPR_LOG_SEVERITY_ERROR,
            "Handshake failed with fatal error SSL_ERROR_SSL");
  }
  gpr_log("tcp_client_posix.cc", 20, GPR_LOG_SEVERITY_ERROR, "refused %d", 7);
  const std::string err = testing::internal::GetCapturedStderr();
  const std::vector<std::string> lines =
      absl::StrSplit(err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << err;
  EXPECT_TRUE(absl::StartsWith(lines[0], "W ")) << lines[0];
  EXPECT_TRUE(absl::StrContains(
      lines[0],
      "ssl_transport_security.cc:1501] grpc: Handshake failed with fatal "
      "error SSL_ERROR_SSL"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1],
                                "tcp_client_posix.cc:20] grpc: "
                                "refused 7"))
      << lines[1];
}

}  // namespace
}  // namespace trainyard
