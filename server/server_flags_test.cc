#include "server/server_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

TEST(ServerFlagsTest, ParsesEveryFlagInBothSpellings) {
  auto cl = ParseServerFlags({"--listen=127.0.0.1:0", "--state-dir", "/tmp/s",
                              "--data_root=/d", "--checkpoint-root", "/c",
                              "--heartbeat-interval-ms=250",
                              "--worker-lease-ms", "3000", "--policy",
                              "first-fit", "--share_gpus", "always"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const YardServerOptions& o = cl->options;
  EXPECT_EQ(o.listen, "127.0.0.1:0");
  EXPECT_EQ(o.state_dir, "/tmp/s");
  EXPECT_EQ(o.data_root, "/d");
  EXPECT_EQ(o.checkpoint_root, "/c");
  EXPECT_EQ(o.heartbeat_interval, absl::Milliseconds(250));
  EXPECT_EQ(o.worker_lease, absl::Seconds(3));
  EXPECT_EQ(o.policy, "first-fit");
  EXPECT_TRUE(o.share_gpus_without_mps);
  EXPECT_FALSE(cl->help);
}

TEST(ServerFlagsTest, ParsesTheSecurityAndShutdownFlags) {
  auto cl =
      ParseServerFlags({"--state-dir=/s", "--listen=0.0.0.0:7443",
                        "--tls-cert=/c.pem", "--tls-key", "/k.pem",
                        "--tls-client-ca=/ca.pem", "--max-streams-per-tenant=8",
                        "--drain-ms=1500", "--cancel-grace-ms=2000",
                        "--preempt-grace-ms=3000", "--restart-backoff-ms=0"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  const YardServerOptions& o = cl->options;
  EXPECT_EQ(o.tls.cert, "/c.pem");
  EXPECT_EQ(o.tls.key, "/k.pem");
  EXPECT_EQ(o.tls.client_ca, "/ca.pem");
  EXPECT_EQ(o.max_streams_per_tenant, 8);
  EXPECT_EQ(o.drain, absl::Milliseconds(1500));
  EXPECT_EQ(o.cancel_grace_ms, 2000);
  EXPECT_EQ(o.preempt_grace_ms, 3000);
  EXPECT_EQ(o.restart_backoff, absl::ZeroDuration());
  EXPECT_FALSE(o.insecure_plaintext);
  // A plaintext wildcard bind only when asked for in so many words.
  auto insecure = ParseServerFlags(
      {"--state-dir=/s", "--listen=0.0.0.0:7070", "--insecure-plaintext"});
  ASSERT_TRUE(insecure.ok()) << insecure.status();
  EXPECT_TRUE(insecure->options.insecure_plaintext);
}

TEST(ServerFlagsTest, DefaultsMatchTheDocumentedOnes) {
  auto cl = ParseServerFlags({"--state-dir=/s"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(cl->options.listen, "127.0.0.1:7070");
  EXPECT_EQ(cl->options.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(cl->options.worker_lease, absl::Seconds(10));
  EXPECT_EQ(cl->options.restart_backoff, absl::Seconds(10));
  EXPECT_EQ(cl->options.job_retention, absl::ZeroDuration()) << "forever";
  EXPECT_FALSE(cl->options.job_retention_keeps_checkpoints);
  EXPECT_FALSE(cl->options.new_job_store);
  EXPECT_TRUE(ParseServerFlags({"--state-dir=/s", "--new-job-store"})
                  ->options.new_job_store);
  EXPECT_FALSE(cl->options.share_gpus_without_mps) << "--share-gpus mps";
  EXPECT_FALSE(ParseServerFlags({"--state-dir=/s", "--share-gpus=mps"})
                   ->options.share_gpus_without_mps);
  EXPECT_TRUE(ParseServerFlags({"--help"})->help);
}

TEST(ServerFlagsTest, ParsesTheRetentionFlags) {
  auto cl = ParseServerFlags({"--state-dir=/s", "--job-retention", "7d",
                              "--job-retention-keeps-checkpoints"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.job_retention, absl::Hours(7 * 24));
  EXPECT_TRUE(cl->options.job_retention_keeps_checkpoints);
  cl = ParseServerFlags({"--state-dir=/s", "--job_retention=0"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->options.job_retention, absl::ZeroDuration());
}

TEST(ServerFlagsTest, BadFlagsAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {{}, "--state-dir"},
      {{"--state-dir"}, "--state-dir: missing value"},
      {{"--state-dir="}, "empty value"},
      {{"--state-dir=/s", "--frobnicate=1"}, "unknown flag --frobnicate"},
      {{"--state-dir=/s", "stray"}, "unexpected argument"},
      {{"--state-dir=/s", "--worker-lease-ms=soon"}, "--worker-lease-ms"},
      {{"--state-dir=/s", "--heartbeat-interval-ms=-5"},
       "--heartbeat-interval-ms"},
      {{"--state-dir=/s", "--listen=0.0.0.0:7070"}, "needs TLS"},
      {{"--state-dir=/s", "--max-streams-per-tenant=-1"},
       "--max-streams-per-tenant"},
      {{"--state-dir=/s", "--drain-ms=soon"}, "--drain-ms"},
      {{"--state-dir=/s", "--restart-backoff-ms=-1"}, "--restart-backoff-ms"},
      {{"--state-dir=/s", "--preempt-grace-ms=-5"}, "--preempt-grace-ms"},
      {{"--state-dir=/s", "--tls-cert="}, "--tls-cert"},
      {{"--state-dir=/s", "--listen=127.0.0.1"}, "HOST:PORT"},
      {{"--state-dir=/s", "--job-retention=7"}, "--job-retention"},
      {{"--state-dir=/s", "--share-gpus=sometimes"},
       "--share-gpus: expected mps or always, got \"sometimes\""},
      {{"--state-dir=/s", "--job-retention=1w"}, "unknown unit"},
      {{"--state-dir=/s", "--job-retention-keeps-checkpoints"},
       "without --job-retention"},
  };
  for (const Case& c : cases) {
    auto cl = ParseServerFlags(c.args);
    ASSERT_FALSE(cl.ok()) << c.mentions;
    EXPECT_EQ(cl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cl.status().message(), HasSubstr(c.mentions));
  }
}

}  // namespace
}  // namespace trainyard::server
