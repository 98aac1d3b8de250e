// Tests of `yard usage` against an in-process fake JobService on a loopback
// port chosen at run time: the window sent for each form of --since and
// --until, the tables printed, and the exit codes of refusals.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "client/job_client.h"
#include "client/output_format.h"
#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);  // 08:00

class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status GetUsage(grpc::ServerContext*, const v1::GetUsageRequest* req,
                        v1::UsageReport* resp) override {
    absl::MutexLock lock(&mu);
    requests.push_back(*req);
    *resp = report;
    return status;
  }

  absl::Mutex mu;
  std::vector<v1::GetUsageRequest> requests ABSL_GUARDED_BY(mu);
  v1::UsageReport report ABSL_GUARDED_BY(mu);
  grpc::Status status ABSL_GUARDED_BY(mu) = grpc::Status::OK;
};

v1::UsageRow Row(std::string tenant, int64_t jobs, int64_t attempts,
                 double gpu_s, double failed_gpu_s, double cpu_s) {
  v1::UsageRow r;
  r.set_tenant(std::move(tenant));
  r.set_jobs(jobs);
  r.set_attempts(attempts);
  r.set_gpu_seconds(gpu_s);
  r.set_failed_gpu_seconds(failed_gpu_s);
  r.set_cpu_slot_seconds(cpu_s);
  return r;
}

v1::UsageReport TwoTenants() {
  v1::UsageReport r;
  *r.mutable_start_time() = ToProtoTime(kNow - absl::Hours(24 * 7));
  *r.mutable_end_time() = ToProtoTime(kNow);
  *r.add_tenants() = Row("default", 2, 3, 4 * 3600 + 1800, 1800, 0);
  *r.add_tenants() = Row("team-b", 1, 1, 0, 0, 20);
  *r.mutable_total() = Row("", 3, 4, 4 * 3600 + 1800, 1800, 20);
  return r;
}

class UsageCommandTest : public InProcessServerTest {
 protected:
  void SetUp() override { Serve({&jobs_}); }
  int Run(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "usage");
    absl::StatusOr<CliArgs> args = ParseArgs(argv, nullptr);
    EXPECT_TRUE(args.ok()) << args.status();
    if (!args.ok()) return -1;
    return RunUsageCommand(*args, *client_, clock_, out_, err_);
  }
  v1::GetUsageRequest LastRequest() {
    absl::MutexLock lock(&jobs_.mu);
    return jobs_.requests.empty() ? v1::GetUsageRequest{}
                                  : jobs_.requests.back();
  }

  FakeJobs jobs_;
  FakeClock clock_{kNow};
  std::ostringstream out_, err_;
};

TEST_F(UsageCommandTest, PrintsHoursByTenantWithATotal) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.report = TwoTenants();
  }
  EXPECT_EQ(Run({}), kExitOk);
  EXPECT_EQ(err_.str(), "");
  EXPECT_EQ(out_.str(),
            "usage from 2027-01-08 08:00:00 UTC to 2027-01-15 08:00:00 UTC\n"
            "TENANT   JOBS  ATTEMPTS  GPU-H  FAILED-GPU-H  CPU-SLOT-H  "
            "FAILED-CPU-SLOT-H\n"
            "default  2     3         4.50   0.50          0.00        0.00\n"
            "team-b   1     1         0.00   0.00          0.0056      0.00\n"
            "total    3     4         4.50   0.50          0.0056      0.00\n");
  // No flags: the server's default window, every tenant, no job rows.
  const v1::GetUsageRequest req = LastRequest();
  EXPECT_FALSE(req.has_start_time());
  EXPECT_FALSE(req.has_end_time());
  EXPECT_EQ(req.tenant(), "");
  EXPECT_FALSE(req.by_job());
}

TEST_F(UsageCommandTest, SendsTheWindowAndTheTenantAsWritten) {
  EXPECT_EQ(Run({"--since", "36h", "--until=90m", "--tenant", "team-b"}),
            kExitOk);
  v1::GetUsageRequest req = LastRequest();
  EXPECT_EQ(FromProtoTime(req.start_time()), kNow - absl::Hours(36));
  EXPECT_EQ(FromProtoTime(req.end_time()), kNow - absl::Minutes(90));
  EXPECT_EQ(req.tenant(), "team-b");

  EXPECT_EQ(Run({"--since", "2026-11-01", "--until", "2026-11-08T12:00:00Z",
                 "--jobs"}),
            kExitOk);
  req = LastRequest();
  EXPECT_EQ(FromProtoTime(req.start_time()),
            absl::FromCivil(absl::CivilDay(2026, 11, 1), absl::UTCTimeZone()));
  EXPECT_EQ(FromProtoTime(req.end_time()),
            absl::FromCivil(absl::CivilSecond(2026, 11, 8, 12, 0, 0),
                            absl::UTCTimeZone()));
  EXPECT_TRUE(req.by_job());
}

TEST_F(UsageCommandTest, ShowsJobRowsWithDeletedJobsAndTruncation) {
  v1::UsageReport r = TwoTenants();
  r.mutable_tenants()->DeleteSubrange(1, 1);
  v1::UsageRow* running = r.add_jobs();
  *running = Row("default", 1, 2, 4 * 3600, 1800, 0);
  running->set_job_id("j-000007");
  running->set_job_name("gpt lr=3e-4\nsecond line");
  running->set_state(v1::RUNNING);
  v1::UsageRow* gone = r.add_jobs();
  *gone = Row("default", 1, 1, 1800, 0, 0.2);
  gone->set_job_id("j-000002");
  gone->set_job_name("mnist");
  r.set_jobs_truncated(true);
  const std::string text = FormatUsageReport(r);
  EXPECT_THAT(text,
              HasSubstr("\n\nJOB       TENANT   STATE    ATTEMPTS  GPU-H  "
                        "FAILED-GPU-H  CPU-SLOT-H  FAILED-CPU-SLOT-H  "
                        "NAME\n"
                        "j-000007  default  RUNNING  2         4.00   "
                        "0.50          0.00        0.00               "
                        "gpt lr=3e-4 second line\n"
                        "j-000002  default  deleted  1         0.50   "
                        "0.00          <0.0001     0.00               "
                        "mnist\n"
                        "(only the 2 jobs with the most GPU time; more "
                        "jobs had usage)\n"));
  EXPECT_THAT(text, Not(HasSubstr("total"))) << "one tenant: no total row";

  v1::UsageReport none;
  *none.mutable_start_time() = r.start_time();
  *none.mutable_end_time() = r.end_time();
  EXPECT_EQ(FormatUsageReport(none),
            "no usage from 2027-01-08 08:00:00 UTC to 2027-01-15 08:00:00 "
            "UTC\n");
}

TEST_F(UsageCommandTest, JsonIsTheReportAsTheServerSentIt) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.report = TwoTenants();
  }
  std::vector<std::string> argv = {"usage", "-o", "json"};
  absl::StatusOr<CliArgs> args = ParseArgs(argv, nullptr);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(RunUsageCommand(*args, *client_, clock_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\"tenant\": \"team-b\""));
  EXPECT_THAT(out_.str(), HasSubstr("\"gpu_seconds\": 16200"));
  EXPECT_THAT(out_.str(),
              HasSubstr("\"start_time\": \"2027-01-08T08:00:00Z\""));
}

TEST_F(UsageCommandTest, RefusalsKeepTheirExitCodes) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.status = grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        "tenant: a token of tenant a cannot see the usage of another tenant");
  }
  EXPECT_EQ(Run({"--tenant", "b"}), kExitDenied);
  EXPECT_THAT(err_.str(), HasSubstr("yard: error: tenant: a token of tenant a "
                                    "cannot see the usage of another tenant"));
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "start_time: ... is not before ...");
  }
  EXPECT_EQ(Run({"--since", "now"}), kExitInvalidArgument);
  EXPECT_THAT(err_.str(), HasSubstr("start_time: "));
}

}  // namespace
}  // namespace trainyard::client
