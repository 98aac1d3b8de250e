// Security end to end, against a real yard-server process: every RPC
// refuses calls without a valid token, roles and tenants are kept apart,
// quotas and stream limits hold, the CLI manages tokens, and TLS / mTLS
// accept the right certificates and refuse the wrong ones (certificates are
// made at test time, tests/test_certs.h).
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/field_errors.h"
#include "common/rpc_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/harness.h"
#include "tests/test_certs.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;
using ::testing::HasSubstr;

// A token of the right shape that the server never issued.
constexpr char kUnknownToken[] =
    "ytk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

class SecurityTest : public ClusterTest {
 protected:
  v1::AdminService::Stub& admin() {
    if (admin_ == nullptr) admin_ = v1::AdminService::NewStub(stubs().channel);
    return *admin_;
  }

  // A new token for `tenant` made with the admin token.
  std::string NewToken(const std::string& tenant, v1::TokenRole role,
                       std::string* id = nullptr) {
    v1::CreateTokenRequest req;
    req.set_tenant(tenant);
    req.set_role(role);
    v1::CreateTokenResponse resp;
    grpc::Status s = admin().CreateToken(ContextWithTimeout().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (id != nullptr) *id = resp.info().id();
    return resp.token();
  }

  grpc::Status SubmitAs(const std::string& token, const v1::JobSpec& spec,
                        v1::SubmitJobResponse* resp = nullptr) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse unused;
    return jobs().SubmitJob(ContextWithToken(token).get(), req,
                            resp != nullptr ? resp : &unused);
  }

  grpc::Status SetTenant(const v1::Tenant& tenant) {
    v1::SetTenantRequest req;
    *req.mutable_tenant() = tenant;
    v1::Tenant resp;
    return admin().SetTenant(ContextWithTimeout().get(), req, &resp);
  }

  // Every RPC of the public services and the worker stream, each called
  // with `token`.
  std::vector<std::pair<std::string, grpc::Status>> CallEverything(
      const std::string& token);

 private:
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

grpc::Status FinishWatch(v1::JobService::Stub& jobs, const std::string& token,
                         const std::string& job_id) {
  auto ctx = ContextWithToken(token);
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  auto reader = jobs.WatchJob(ctx.get(), req);
  v1::JobEvent e;
  while (reader->Read(&e)) {
  }
  return reader->Finish();
}

grpc::Status FinishLogs(v1::JobService::Stub& jobs, const std::string& token,
                        const std::string& job_id) {
  auto ctx = ContextWithToken(token);
  v1::GetJobLogsRequest req;
  req.set_job_id(job_id);
  auto reader = jobs.GetJobLogs(ctx.get(), req);
  v1::LogChunk c;
  while (reader->Read(&c)) {
  }
  return reader->Finish();
}

grpc::Status ConnectWorker(grpc::Channel& channel, const std::string& token) {
  auto stub = v1::WorkerService::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  auto ctx = ContextWithToken(token);
  auto stream = stub->Connect(ctx.get());
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id("intruder");
  hello.mutable_hello()->set_cpu_slots(1);
  stream->Write(hello);
  stream->WritesDone();
  v1::ServerMessage m;
  while (stream->Read(&m)) {
  }
  return stream->Finish();
}

std::vector<std::pair<std::string, grpc::Status>> SecurityTest::CallEverything(
    const std::string& token) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  auto call = [&](const std::string& name,
                  const std::function<grpc::Status(grpc::ClientContext*)>& f) {
    out.emplace_back(name, f(ContextWithToken(token).get()));
  };
  const std::string job = "j-000001";
  call("SubmitJob", [&](auto* c) {
    v1::SubmitJobRequest r;
    *r.mutable_spec() = MnistSpec{}.ToProto();
    v1::SubmitJobResponse p;
    return jobs().SubmitJob(c, r, &p);
  });
  call("GetJob", [&](auto* c) {
    v1::GetJobRequest r;
    r.set_job_id(job);
    v1::Job p;
    return jobs().GetJob(c, r, &p);
  });
  call("ListJobs", [&](auto* c) {
    v1::ListJobsResponse p;
    return jobs().ListJobs(c, v1::ListJobsRequest(), &p);
  });
  call("CancelJob", [&](auto* c) {
    v1::CancelJobRequest r;
    r.set_job_id(job);
    v1::Job p;
    return jobs().CancelJob(c, r, &p);
  });
  call("SuspendJob", [&](auto* c) {
    v1::SuspendJobRequest r;
    r.set_job_id(job);
    v1::Job p;
    return jobs().SuspendJob(c, r, &p);
  });
  call("ResumeJob", [&](auto* c) {
    v1::ResumeJobRequest r;
    r.set_job_id(job);
    v1::Job p;
    return jobs().ResumeJob(c, r, &p);
  });
  call("DeleteJob", [&](auto* c) {
    v1::DeleteJobRequest r;
    r.set_job_id(job);
    v1::DeleteJobResponse p;
    return jobs().DeleteJob(c, r, &p);
  });
  call("ListCheckpoints", [&](auto* c) {
    v1::ListCheckpointsRequest r;
    r.set_job_id(job);
    v1::ListCheckpointsResponse p;
    return jobs().ListCheckpoints(c, r, &p);
  });
  call("GetJobMetrics", [&](auto* c) {
    v1::GetJobMetricsRequest r;
    r.set_job_id(job);
    v1::JobMetrics p;
    return jobs().GetJobMetrics(c, r, &p);
  });
  call("DownloadCheckpoint", [&](auto* c) {
    v1::DownloadCheckpointRequest r;
    r.set_job_id(job);
    auto reader = jobs().DownloadCheckpoint(c, r);
    v1::CheckpointChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  });
  call("GetUsage", [&](auto* c) {
    v1::UsageReport p;
    return jobs().GetUsage(c, v1::GetUsageRequest(), &p);
  });
  out.emplace_back("WatchJob", FinishWatch(jobs(), token, job));
  out.emplace_back("GetJobLogs", FinishLogs(jobs(), token, job));
  call("ListWorkers", [&](auto* c) {
    v1::ListWorkersResponse p;
    return cluster().ListWorkers(c, v1::ListWorkersRequest(), &p);
  });
  call("GetClusterStatus", [&](auto* c) {
    v1::ClusterStatus p;
    return cluster().GetClusterStatus(c, v1::GetClusterStatusRequest(), &p);
  });
  call("CreateToken", [&](auto* c) {
    v1::CreateTokenRequest r;
    r.set_tenant("mallory");
    r.set_role(v1::ADMIN);
    v1::CreateTokenResponse p;
    return admin().CreateToken(c, r, &p);
  });
  call("ListTokens", [&](auto* c) {
    v1::ListTokensResponse p;
    return admin().ListTokens(c, v1::ListTokensRequest(), &p);
  });
  call("RevokeToken", [&](auto* c) {
    v1::RevokeTokenRequest r;
    r.set_id("t-000000000000");
    v1::TokenInfo p;
    return admin().RevokeToken(c, r, &p);
  });
  call("SetTenant", [&](auto* c) {
    v1::SetTenantRequest r;
    r.mutable_tenant()->set_name("mallory");
    v1::Tenant p;
    return admin().SetTenant(c, r, &p);
  });
  call("ListTenants", [&](auto* c) {
    v1::ListTenantsResponse p;
    return admin().ListTenants(c, v1::ListTenantsRequest(), &p);
  });
  out.emplace_back("WorkerService.Connect",
                   ConnectWorker(*stubs().channel, token));
  return out;
}

TEST_F(SecurityTest, EveryRpcRefusesAMissingWrongOrRevokedToken) {
  YARD_ASSERT_OK(StartServer());
  std::string revoked_id;
  const std::string revoked = NewToken("team-a", v1::TENANT, &revoked_id);
  v1::RevokeTokenRequest rr;
  rr.set_id(revoked_id);
  v1::TokenInfo info;
  ASSERT_TRUE(admin().RevokeToken(ContextWithTimeout().get(), rr, &info).ok());
  EXPECT_TRUE(info.revoked());

  const std::vector<std::pair<std::string, std::string>> tokens = {
      {"", "missing bearer token"},
      {"not-a-token", "malformed bearer token"},
      {kUnknownToken, "invalid or revoked"},
      {revoked, "invalid or revoked"}};
  for (const auto& [token, mentions] : tokens) {
    for (const auto& [rpc, status] : CallEverything(token)) {
      EXPECT_TRUE(
          RpcFailedWith(status, grpc::StatusCode::UNAUTHENTICATED, {mentions}))
          << rpc << " with token \"" << token << "\"";
    }
  }
  // The caller is checked before the request: a bad log request without a
  // token is UNAUTHENTICATED, not INVALID_ARGUMENT.
  {
    auto ctx = ContextWithToken("");
    v1::GetJobLogsRequest bad;
    bad.set_job_id("j-000001");
    bad.set_tail_lines(-1);
    auto reader = jobs().GetJobLogs(ctx.get(), bad);
    v1::LogChunk c;
    while (reader->Read(&c)) {
    }
    EXPECT_TRUE(RpcFailedWith(reader->Finish(),
                              grpc::StatusCode::UNAUTHENTICATED,
                              {"missing bearer token"}));
  }
  // The scheme is case-insensitive (RFC 7235); two authorization entries
  // are refused, whichever comes first.
  const std::string admin_token = CurrentCredentials().token;
  for (const char* scheme : {"bearer ", "BEARER ", "Bearer "}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", scheme + admin_token);
    v1::ListJobsRequest list;
    v1::ListJobsResponse listed;
    grpc::Status s = jobs().ListJobs(&ctx, list, &listed);
    EXPECT_TRUE(s.ok()) << scheme << ": " << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + admin_token);
    ctx.AddMetadata("authorization", "Bearer junk");
    v1::ListJobsRequest list;
    v1::ListJobsResponse listed;
    EXPECT_TRUE(RpcFailedWith(jobs().ListJobs(&ctx, list, &listed),
                              grpc::StatusCode::UNAUTHENTICATED,
                              {"more than one authorization"}));
  }
  // Nothing got in: no job, no token for "mallory".
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  EXPECT_TRUE(all.empty());
  v1::ListTokensRequest lr;
  lr.set_tenant("mallory");
  v1::ListTokensResponse listed;
  ASSERT_TRUE(admin().ListTokens(ContextWithTimeout().get(), lr, &listed).ok());
  EXPECT_EQ(listed.tokens_size(), 0);
  // Health stays open for probes, for the server and each service.
  YARD_ASSERT_OK(CheckHealth(*stubs().channel));
  for (const char* service :
       {"trainyard.v1.JobService", "trainyard.v1.ClusterService",
        "trainyard.v1.WorkerService", "trainyard.v1.AdminService"}) {
    YARD_ASSERT_OK(CheckHealth(*stubs().channel, service));
  }
  EXPECT_FALSE(
      CheckHealth(*stubs().channel, "trainyard.v1.NoSuchService").ok());
}

// Revoking a worker's join token cuts off a worker already connected with
// it (at its next heartbeat), and it cannot come back: refused, it exits 3
// (a supervisor shows it failing, not a worker that looks healthy and
// never joins), and no job is placed on it any more.
TEST_F(SecurityTest, ARevokedJoinTokenCutsOffItsConnectedWorker) {
  YARD_ASSERT_OK(StartServer());
  std::string id;
  const std::string token = NewToken("workers", v1::WORKER, &id);
  const std::string file = dir().WriteFile("w3.token", token + "\n");
  YARD_ASSIGN_OR_FAIL(WorkerProcess * w3,
                      StartReadyWorker({.name = "w3", .token_file = file}));
  v1::RevokeTokenRequest revoke;
  revoke.set_id(id);
  v1::TokenInfo info;
  ASSERT_TRUE(
      admin().RevokeToken(ContextWithTimeout().get(), revoke, &info).ok());
  YARD_ASSERT_OK(PollUntil(
      "the server to drop the worker", Scaled(absl::Seconds(20)), [&] {
        return server().process().OutputTail(20000).find(
                   "worker w3 disconnected") != std::string::npos;
      }));
  EXPECT_THAT(server().process().OutputTail(20000), HasSubstr("revoked"));
  // It tries again, is refused and exits.
  std::optional<ExitStatus> exited =
      w3->process().WaitForExit(Scaled(absl::Seconds(30)));
  ASSERT_TRUE(exited.has_value()) << w3->process().OutputTail();
  EXPECT_TRUE(exited->Exited(3)) << exited->ToString();
  EXPECT_THAT(w3->process().OutputTail(), HasSubstr("refused this worker"));
}

// A watch opened with a token ends once the token is revoked: revocation
// holds for the streams already open, not only for the next call.
TEST_F(SecurityTest, ARevokedTokenEndsItsOpenStreams) {
  YARD_ASSERT_OK(StartServer());
  std::string id;
  const std::string token = NewToken("team-a", v1::TENANT, &id);
  // No worker: the jobs stay queued and the watches open.
  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
  };
  std::vector<std::string> jobs_of_a;
  std::vector<Open> watches;
  for (int i = 0; i < 2; ++i) {
    v1::SubmitJobResponse sub;
    ASSERT_TRUE(SubmitAs(token, MnistSpec{}.ToProto(), &sub).ok());
    jobs_of_a.push_back(sub.job().id());
    Open o{ContextWithToken(token, Scaled(absl::Seconds(60))), nullptr};
    v1::WatchJobRequest req;
    req.set_job_id(sub.job().id());
    o.reader = jobs().WatchJob(o.ctx.get(), req);
    v1::JobEvent first;
    ASSERT_TRUE(o.reader->Read(&first));  // it is being served
    watches.push_back(std::move(o));
  }
  // Another token's revocation leaves the streams open: after their
  // recheck (500 ms) the first still reads its job's end.
  std::string other_id;
  NewToken("team-b", v1::TENANT, &other_id);
  v1::RevokeTokenRequest revoke;
  revoke.set_id(other_id);
  v1::TokenInfo info;
  ASSERT_TRUE(
      admin().RevokeToken(ContextWithTimeout().get(), revoke, &info).ok());
  absl::SleepFor(absl::Seconds(1));
  v1::CancelJobRequest cancel;
  cancel.set_job_id(jobs_of_a[0]);
  v1::Job cancelled;
  ASSERT_TRUE(
      jobs().CancelJob(ContextWithToken(token).get(), cancel, &cancelled).ok());
  v1::JobEvent e;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  while (watches[0].reader->Read(&e)) {
    if (e.has_state_change()) last = e.state_change().to();
  }
  EXPECT_TRUE(watches[0].reader->Finish().ok());
  EXPECT_EQ(last, v1::CANCELLED);

  // Its own token's revocation ends the other.
  revoke.set_id(id);
  ASSERT_TRUE(
      admin().RevokeToken(ContextWithTimeout().get(), revoke, &info).ok());
  while (watches[1].reader->Read(&e)) {
  }
  const grpc::Status end = watches[1].reader->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << end.error_message();
  EXPECT_THAT(end.error_message(), HasSubstr("revoked"));
}

TEST_F(SecurityTest, EachRoleReachesOnlyItsServices) {
  YARD_ASSERT_OK(StartServer());
  const std::string tenant = NewToken("team-a", v1::TENANT);
  const std::string worker = NewToken("workers", v1::WORKER);
  for (const auto& [rpc, status] : CallEverything(tenant)) {
    const bool admin_rpc = rpc == "CreateToken" || rpc == "ListTokens" ||
                           rpc == "RevokeToken" || rpc == "SetTenant" ||
                           rpc == "ListTenants";
    if (admin_rpc) {
      EXPECT_TRUE(RpcFailedWith(status, grpc::StatusCode::PERMISSION_DENIED,
                                {"not an admin token"}))
          << rpc;
    } else if (rpc == "WorkerService.Connect") {
      EXPECT_TRUE(RpcFailedWith(status, grpc::StatusCode::PERMISSION_DENIED,
                                {"not a worker join token"}));
    } else {
      EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << rpc;
      EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << rpc;
    }
  }
  for (const auto& [rpc, status] : CallEverything(worker)) {
    if (rpc == "WorkerService.Connect") continue;  // its own service
    EXPECT_TRUE(RpcFailedWith(status, grpc::StatusCode::PERMISSION_DENIED, {}))
        << rpc;
  }
}

TEST_F(SecurityTest, ATenantSeesAndTouchesOnlyItsOwnJobs) {
  YARD_ASSERT_OK(StartServer());
  const std::string a = NewToken("team-a", v1::TENANT);
  const std::string b = NewToken("team-b", v1::TENANT);
  v1::SubmitJobResponse mine;
  ASSERT_TRUE(SubmitAs(a, MnistSpec{.name = "secret"}.ToProto(), &mine).ok());
  const std::string id = mine.job().id();
  EXPECT_EQ(mine.job().tenant(), "team-a");
  ASSERT_TRUE(SubmitAs(b, MnistSpec{.name = "other"}.ToProto()).ok());

  // Another tenant's job looks exactly like one that does not exist.
  const std::string not_found = absl::StrCat("job ", id, " not found");
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::Job job;
  grpc::Status s = jobs().GetJob(ContextWithToken(b).get(), get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);
  get.set_job_id("j-999999");
  s = jobs().GetJob(ContextWithToken(b).get(), get, &job);
  EXPECT_EQ(s.error_message(), "job j-999999 not found");
  EXPECT_EQ(FinishWatch(jobs(), b, id).error_message(), not_found);
  EXPECT_EQ(FinishLogs(jobs(), b, id).error_message(), not_found);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  s = jobs().CancelJob(ContextWithToken(b).get(), cancel, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);
  v1::ListCheckpointsRequest checkpoints;
  checkpoints.set_job_id(id);
  v1::ListCheckpointsResponse listed;
  s = jobs().ListCheckpoints(ContextWithToken(b).get(), checkpoints, &listed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);
  CommandResult download = Yard({"--token", b, "download", id});
  EXPECT_TRUE(CliFailedWith(download, 4, {not_found}));
  v1::GetJobMetricsRequest metrics;
  metrics.set_job_id(id);
  v1::JobMetrics curve;
  s = jobs().GetJobMetrics(ContextWithToken(b).get(), metrics, &curve);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);
  EXPECT_TRUE(
      CliFailedWith(Yard({"--token", b, "metrics", id}), 4, {not_found}));
  v1::SuspendJobRequest suspend;
  suspend.set_job_id(id);
  s = jobs().SuspendJob(ContextWithToken(b).get(), suspend, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);
  v1::ResumeJobRequest resume;
  resume.set_job_id(id);
  s = jobs().ResumeJob(ContextWithToken(b).get(), resume, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);
  v1::DeleteJobRequest del;
  del.set_job_id(id);
  v1::DeleteJobResponse deleted;
  s = jobs().DeleteJob(ContextWithToken(b).get(), del, &deleted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), not_found);

  // Lists: each tenant its own, the admin everything; asking for another
  // tenant's list is refused.
  auto list = [&](const std::string& token, const std::string& tenant,
                  v1::ListJobsResponse* out) {
    v1::ListJobsRequest req;
    req.set_tenant(tenant);
    return jobs().ListJobs(ContextWithToken(token).get(), req, out);
  };
  v1::ListJobsResponse seen;
  ASSERT_TRUE(list(b, "", &seen).ok());
  ASSERT_EQ(seen.jobs_size(), 1);
  EXPECT_EQ(seen.jobs(0).tenant(), "team-b");
  EXPECT_TRUE(RpcFailedWith(list(b, "team-a", &seen),
                            grpc::StatusCode::PERMISSION_DENIED, {"team-b"}));
  ASSERT_TRUE(list(CurrentCredentials().token, "", &seen).ok());
  EXPECT_EQ(seen.jobs_size(), 2);
  // The cluster's job counts likewise: a tenant's own, the admin's all.
  auto queued = [&](const std::string& token) -> int64_t {
    v1::ClusterStatus status;
    grpc::Status s = cluster().GetClusterStatus(
        ContextWithToken(token).get(), v1::GetClusterStatusRequest(), &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return status.jobs_queued();
  };
  EXPECT_EQ(queued(b), 1);
  EXPECT_EQ(queued(CurrentCredentials().token), 2);
  // Usage likewise: a tenant's own, never another's.
  v1::GetUsageRequest usage;
  usage.set_tenant("team-a");
  v1::UsageReport report;
  EXPECT_TRUE(RpcFailedWith(
      jobs().GetUsage(ContextWithToken(b).get(), usage, &report),
      grpc::StatusCode::PERMISSION_DENIED,
      {"a token of tenant team-b cannot see the usage of another tenant"}));
  EXPECT_TRUE(CliFailedWith(Yard({"--token", b, "usage", "--tenant", "team-a"}),
                            8, {"cannot see the usage"}));
  ASSERT_TRUE(jobs().GetUsage(ContextWithToken(a).get(), usage, &report).ok());
  ASSERT_TRUE(jobs()
                  .GetUsage(ContextWithToken(CurrentCredentials().token).get(),
                            usage, &report)
                  .ok());

  // The owner still has the job, untouched; the owner may cancel it.
  get.set_job_id(id);
  ASSERT_TRUE(jobs().GetJob(ContextWithToken(a).get(), get, &job).ok());
  EXPECT_EQ(job.state(), v1::QUEUED);
  ASSERT_TRUE(jobs().CancelJob(ContextWithToken(a).get(), cancel, &job).ok());
  EXPECT_EQ(job.state(), v1::CANCELLED);
  // Still not b's to delete; the owner deletes it.
  s = jobs().DeleteJob(ContextWithToken(b).get(), del, &deleted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(jobs().DeleteJob(ContextWithToken(a).get(), del, &deleted).ok());
  EXPECT_EQ(deleted.job_id(), id);
  s = jobs().GetJob(ContextWithToken(a).get(), get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SecurityTest, QueuedJobAndGpuQuotasAreEnforced) {
  YARD_ASSERT_OK(StartServer());
  const std::string a = NewToken("team-a", v1::TENANT);
  const std::string b = NewToken("team-b", v1::TENANT);
  v1::Tenant quota;
  quota.set_name("team-a");
  quota.set_max_queued_jobs(2);
  quota.set_max_gpus(1);
  ASSERT_TRUE(SetTenant(quota).ok());

  v1::SubmitJobResponse first;
  ASSERT_TRUE(SubmitAs(a, MnistSpec{}.ToProto(), &first).ok());
  v1::SubmitJobRequest with_id;
  *with_id.mutable_spec() = MnistSpec{}.ToProto();
  with_id.set_request_id("retry-me");
  v1::SubmitJobResponse second;
  ASSERT_TRUE(
      jobs().SubmitJob(ContextWithToken(a).get(), with_id, &second).ok());
  EXPECT_TRUE(RpcFailedWith(SubmitAs(a, MnistSpec{}.ToProto()),
                            grpc::StatusCode::RESOURCE_EXHAUSTED,
                            {"team-a", "2 jobs queued", "limit is 2"}));
  // A retry of a submission already made gets its job, full queue or not
  // (its first answer may have been lost), and so does its dry run.
  v1::SubmitJobResponse retried;
  grpc::Status retry =
      jobs().SubmitJob(ContextWithToken(a).get(), with_id, &retried);
  ASSERT_TRUE(retry.ok()) << retry.error_message();
  EXPECT_TRUE(retried.already_existed());
  EXPECT_EQ(retried.job().id(), second.job().id());
  with_id.set_validate_only(true);
  retry = jobs().SubmitJob(ContextWithToken(a).get(), with_id, &retried);
  ASSERT_TRUE(retry.ok()) << retry.error_message();
  EXPECT_TRUE(retried.already_existed());
  with_id.set_validate_only(false);
  // Other tenants are not affected.
  ASSERT_TRUE(SubmitAs(b, MnistSpec{}.ToProto()).ok());
  // A job asking for more GPUs than the tenant may ever hold.
  v1::JobSpec wide = MnistSpec{}.ToProto();
  wide.mutable_resources()->set_gpus(2);
  EXPECT_TRUE(
      RpcFailedWith(SubmitAs(a, wide), grpc::StatusCode::INVALID_ARGUMENT,
                    {"spec.resources.gpus", "at most 1 GPUs", "asks for 2"}));
  // Or more CPU slots.
  quota.set_max_cpu_slots(1);
  ASSERT_TRUE(SetTenant(quota).ok());
  v1::JobSpec ranks = MnistSpec{}.ToProto();
  ranks.mutable_resources()->set_cpu_ranks(2);
  EXPECT_TRUE(RpcFailedWith(
      SubmitAs(a, ranks), grpc::StatusCode::INVALID_ARGUMENT,
      {"spec.resources.cpu_ranks", "at most 1 CPU slots", "asks for 2"}));

  // The CLI: exit 9, one line.
  const std::string spec = WriteSpec("a.yaml", MnistSpec{}.ToYaml());
  CommandResult r = Yard({"--token", a, "submit", spec});
  EXPECT_TRUE(CliFailedWith(r, 9, {"limit is 2"}));
  // One that never fits the quota is a spec to change: exit 3.
  const std::string wide_spec =
      WriteSpec("wide.yaml", MnistSpec{.gpus = 2}.ToYaml());
  EXPECT_TRUE(CliFailedWith(Yard({"--token", a, "submit", wide_spec}), 3,
                            {"spec.resources.gpus", "at most 1 GPUs"}));
  // Room again once one leaves the queue: suspended, it does not count...
  v1::SuspendJobRequest suspend;
  suspend.set_job_id(first.job().id());
  v1::Job job;
  ASSERT_TRUE(jobs().SuspendJob(ContextWithToken(a).get(), suspend, &job).ok());
  EXPECT_EQ(job.state(), v1::SUSPENDED);
  EXPECT_TRUE(SubmitAs(a, MnistSpec{}.ToProto()).ok());
  // ...and a resume that would overfill the queue is refused like a submit.
  v1::ResumeJobRequest resume;
  resume.set_job_id(first.job().id());
  EXPECT_TRUE(RpcFailedWith(
      jobs().ResumeJob(ContextWithToken(a).get(), resume, &job),
      grpc::StatusCode::RESOURCE_EXHAUSTED, {"team-a", "limit is 2"}));
  EXPECT_TRUE(CliFailedWith(Yard({"--token", a, "resume", first.job().id()}), 9,
                            {"limit is 2"}));
  v1::CancelJobRequest cancel;
  cancel.set_job_id(first.job().id());
  ASSERT_TRUE(jobs().CancelJob(ContextWithToken(a).get(), cancel, &job).ok());
  EXPECT_EQ(job.state(), v1::CANCELLED) << "a suspended job cancels at once";

  // Bad quotas are refused with the field named.
  quota.set_max_gpus(-1);
  EXPECT_TRUE(RpcFailedWith(SetTenant(quota),
                            grpc::StatusCode::INVALID_ARGUMENT, {"max_gpus"}));
  quota.set_max_gpus(0);
  quota.set_name("Not A Tenant");
  EXPECT_TRUE(RpcFailedWith(SetTenant(quota),
                            grpc::StatusCode::INVALID_ARGUMENT,
                            {"tenant.name"}));
}

// A tenant's priority cap: a job above it is refused naming spec.priority
// (so a tenant cannot preempt others at will); at or below it, accepted.
TEST_F(SecurityTest, ATenantsPriorityCapIsEnforcedAtSubmit) {
  YARD_ASSERT_OK(StartServer());
  const std::string a = NewToken("team-a", v1::TENANT);
  CommandResult set = Yard({"tenant", "set", "team-a", "--max-priority", "0"});
  ASSERT_EQ(set.exit_code(), 0) << set.DebugString();
  EXPECT_THAT(set.out, HasSubstr("max priority 0"));
  CommandResult ls = Yard({"tenant", "ls"});
  EXPECT_THAT(ls.out, HasSubstr("MAX_PRIORITY")) << ls.out;

  v1::JobSpec urgent = MnistSpec{}.ToProto();
  urgent.set_priority(5);
  grpc::Status refused = SubmitAs(a, urgent);
  EXPECT_TRUE(RpcFailedWith(refused, grpc::StatusCode::INVALID_ARGUMENT,
                            {"priority: at most 0 for tenant team-a"}));
  EXPECT_TRUE(IsAboutField(FromGrpcStatus(refused), "spec.priority"));
  const std::string spec = WriteSpec("p.yaml", MnistSpec{}.ToYaml());
  EXPECT_TRUE(CliFailedWith(
      Yard({"--token", a, "submit", spec, "--set", "priority=5"}),
      YardExit::kInvalidArgument, {"priority: at most 0", "got 5"}));
  ASSERT_TRUE(SubmitAs(a, MnistSpec{}.ToProto()).ok());  // priority 0

  // Removed, the spec's own limit is all.
  ASSERT_EQ(
      Yard({"tenant", "set", "team-a", "--max-priority", "none"}).exit_code(),
      0);
  ASSERT_TRUE(SubmitAs(a, urgent).ok());
  EXPECT_TRUE(CliFailedWith(
      Yard({"tenant", "set", "team-a", "--max-priority", "2000"}),
      YardExit::kUsage, {"--max-priority: must be an integer from -1000"}));
}

// yard set-priority: a tenant changes its own job's priority up to its
// cap; another tenant's job is not found; an ended job's is refused; each
// refusal leaves the stored priority as it was.
TEST_F(SecurityTest, SetPriorityKeepsToTheTenantsCap) {
  YARD_ASSERT_OK(StartServer());
  const std::string a = NewToken("team-a", v1::TENANT);
  const std::string b = NewToken("team-b", v1::TENANT);
  ASSERT_EQ(
      Yard({"tenant", "set", "team-a", "--max-priority", "10"}).exit_code(), 0);
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(SubmitAs(a, MnistSpec{}.ToProto(), &submitted).ok());
  const std::string id = submitted.job().id();

  CommandResult set =
      Yard({"--token", a, "set-priority", id, "--priority", "10"});
  ASSERT_EQ(set.exit_code(), 0) << set.DebugString();
  EXPECT_EQ(set.out, absl::StrCat("job ", id, " priority 10 (QUEUED)\n"));
  EXPECT_TRUE(CliFailedWith(
      Yard({"--token", a, "set-priority", id, "--priority", "11"}),
      YardExit::kInvalidArgument,
      {"priority: at most 10 for tenant team-a", "got 11"}));
  EXPECT_TRUE(
      CliFailedWith(Yard({"--token", b, "set-priority", id, "--priority", "1"}),
                    YardExit::kNotFound, {id}));
  EXPECT_TRUE(CliFailedWith(
      Yard({"--token", a, "set-priority", id, "--priority", "1001"}),
      YardExit::kUsage, {"--priority: must be an integer from -1000 to 1000"}));
  EXPECT_TRUE(CliFailedWith(Yard({"--token", a, "set-priority", id}),
                            YardExit::kUsage, {"missing --priority"}));
  CommandResult get = Yard({"--token", a, "-o", "json", "get", id});
  EXPECT_THAT(get.out, HasSubstr("\"priority\": 10")) << get.out;

  ASSERT_EQ(Yard({"--token", a, "cancel", id}).exit_code(), 0);
  EXPECT_TRUE(CliFailedWith(
      Yard({"--token", a, "set-priority", id, "--priority", "-5"}),
      YardExit::kFailedPrecondition, {"already CANCELLED"}));
}

TEST_F(SecurityTest, ARunningQuotaHoldsATenantsJobsBack) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w1"}).status());
  YARD_ASSERT_OK(StartReadyWorker({.name = "w2"}).status());
  const std::string a = NewToken("team-a", v1::TENANT);
  v1::Tenant quota;
  quota.set_name("team-a");
  quota.set_max_cpu_slots(1);
  ASSERT_TRUE(SetTenant(quota).ok());
  v1::SubmitJobResponse first, second;
  ASSERT_TRUE(SubmitAs(a, MnistSpec{.steps = 300}.ToProto(), &first).ok());
  ASSERT_TRUE(SubmitAs(a, MnistSpec{.steps = 20}.ToProto(), &second).ok());
  // Two free workers, yet the second job waits for the tenant's quota.
  YARD_ASSERT_OK(PollUntil("the second job to wait for team-a's quota",
                           JobTimeout(), [&] {
                             absl::StatusOr<v1::Job> j =
                                 GetJob(jobs(), second.job().id());
                             return j.ok() && j->state() == v1::QUEUED &&
                                    j->state_reason().find("CPU slot quota") !=
                                        std::string::npos;
                           }));
  YARD_ASSIGN_OR_FAIL(v1::Job one,
                      WaitForTerminal(jobs(), first.job().id(), JobTimeout()));
  YARD_ASSIGN_OR_FAIL(v1::Job two,
                      WaitForTerminal(jobs(), second.job().id(), JobTimeout()));
  EXPECT_EQ(one.state(), v1::SUCCEEDED);
  EXPECT_EQ(two.state(), v1::SUCCEEDED);
  EXPECT_GE(two.start_time().seconds(), one.end_time().seconds())
      << "the quota allows one job of team-a at a time";
}

TEST_F(SecurityTest, OpenStreamsPerTenantAreLimited) {
  YARD_ASSERT_OK(StartServer(
      {.extra_args = {"--max-streams-per-tenant", "2"}}));
  const std::string a = NewToken("team-a", v1::TENANT);
  const std::string b = NewToken("team-b", v1::TENANT);
  v1::SubmitJobResponse ja, jb;
  ASSERT_TRUE(SubmitAs(a, MnistSpec{}.ToProto(), &ja).ok());
  ASSERT_TRUE(SubmitAs(b, MnistSpec{}.ToProto(), &jb).ok());

  // Two open watches (no worker: the job stays queued, the streams open).
  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
  };
  auto open = [&](const std::string& token, const std::string& id) {
    Open o{ContextWithToken(token, absl::Seconds(60)), nullptr};
    v1::WatchJobRequest req;
    req.set_job_id(id);
    o.reader = jobs().WatchJob(o.ctx.get(), req);
    return o;
  };
  std::vector<Open> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(open(a, ja.job().id()));
    v1::JobEvent first;
    ASSERT_TRUE(streams.back().reader->Read(&first));  // it is being served
  }
  EXPECT_TRUE(RpcFailedWith(FinishWatch(jobs(), a, ja.job().id()),
                            grpc::StatusCode::RESOURCE_EXHAUSTED,
                            {"team-a", "limit per tenant is 2"}));
  EXPECT_TRUE(RpcFailedWith(FinishLogs(jobs(), a, ja.job().id()),
                            grpc::StatusCode::RESOURCE_EXHAUSTED, {"team-a"}));
  // Another tenant still can.
  Open other = open(b, jb.job().id());
  v1::JobEvent e;
  EXPECT_TRUE(other.reader->Read(&e));
  // Closing one frees its slot as soon as the server sees the cancel: a
  // stream opened after it is served, again and again (opened at once, it
  // may come before the cancel is seen: refused then, it is tried again).
  for (int i = 0; i < 3; ++i) {
    streams[0].ctx->TryCancel();
    (void)streams[0].reader->Finish();
    const absl::Time give_up = absl::Now() + absl::Seconds(2);
    bool served = false;
    while (!served && absl::Now() < give_up) {
      streams[0] = open(a, ja.job().id());
      v1::JobEvent ev;
      served = streams[0].reader->Read(&ev);
      if (!served) {
        const grpc::Status refused = streams[0].reader->Finish();
        ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
            << refused.error_message();
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    ASSERT_TRUE(served) << "the slot of a cancelled stream was still taken";
  }
  for (Open* o : {&streams[1], &other}) {
    o->ctx->TryCancel();
    (void)o->reader->Finish();
  }
}

TEST_F(SecurityTest, CliManagesTokensAndTokensAreKeptSecret) {
  YARD_ASSERT_OK(StartServer());
  // The first start printed the admin token once and left both token files
  // readable by the owner only.
  const std::string admin = CurrentCredentials().token;
  for (const std::string& f :
       {server().admin_token_file(), server().worker_token_file()}) {
    struct stat st;
    ASSERT_EQ(stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  EXPECT_THAT(server().process().OutputTail(10000), HasSubstr(admin));

  CommandResult created = Yard({"token", "create", "team-c"});
  ASSERT_EQ(created.exit_code(), 0) << created.DebugString();
  const size_t at = created.out.find("ytk_");
  ASSERT_NE(at, std::string::npos) << created.out;
  const std::string token = created.out.substr(at, created.out.find('\n', at) - at);
  CommandResult ls = Yard({"--token", token, "ls"});
  EXPECT_EQ(ls.exit_code(), 0) << ls.DebugString();
  CommandResult tokens = Yard({"token", "ls"});
  EXPECT_THAT(tokens.out, HasSubstr("team-c"));
  EXPECT_THAT(tokens.out, ::testing::Not(HasSubstr(token)))
      << "listings never show secrets";

  // No token at all: exit 8 with a hint where to put one.
  CommandResult none = RunCommand({BinPath("yard"), "--server",
                                   server().address(), "--config",
                                   dir().WriteFile("empty.conf", ""), "ls"},
                                  dir().LogPrefix("yard"), Scaled(absl::Seconds(30)));
  EXPECT_TRUE(CliFailedWith(none, 8, {"missing bearer token", "--token"}));
  // A config file can carry the token.
  const std::string conf = dir().WriteFile(
      "yard.conf", absl::StrCat("# team C\nserver = ", server().address(),
                                "\ntoken = ", token, "\n"));
  CommandResult via_conf = RunCommand({BinPath("yard"), "--config", conf, "ls"},
                                      dir().LogPrefix("yard"),
                                      Scaled(absl::Seconds(30)));
  EXPECT_EQ(via_conf.exit_code(), 0) << via_conf.DebugString();

  // Revoked: refused at once.
  const std::string id = created.out.substr(created.out.find("t-"), 14);
  CommandResult revoke = Yard({"token", "revoke", id});
  EXPECT_EQ(revoke.exit_code(), 0) << revoke.DebugString();
  EXPECT_TRUE(CliFailedWith(Yard({"--token", token, "ls"}), 8,
                            {"invalid or revoked"}));
  // Tenant tokens cannot make tokens.
  CommandResult other = Yard({"token", "create", "team-d"});
  ASSERT_EQ(other.exit_code(), 0);
  const size_t at2 = other.out.find("ytk_");
  const std::string d = other.out.substr(at2, other.out.find('\n', at2) - at2);
  EXPECT_TRUE(CliFailedWith(Yard({"--token", d, "token", "create", "x"}), 8,
                            {"not an admin token"}));
  EXPECT_TRUE(CliFailedWith(Yard({"token", "create", "Bad Name"}), 3,
                            {"tenant name"}));

  // The store keeps digests, never the secrets; a restart prints nothing.
  YARD_ASSERT_OK(KillAndRestartServer());
  for (const char* f : {"auth.db", "auth.db-wal"}) {
    const std::string bytes =
        ReadFileOrEmpty(server().options().state_dir + "/" + f);
    EXPECT_EQ(bytes.find(token), std::string::npos) << f;
    EXPECT_EQ(bytes.find(admin), std::string::npos) << f;
  }
  EXPECT_THAT(server().process().OutputTail(10000),
              ::testing::Not(HasSubstr(admin)));
  EXPECT_EQ(Yard({"ls"}).exit_code(), 0) << "the admin token survives";
}

TEST_F(SecurityTest, NonLoopbackPlaintextIsRefused) {
  CommandResult r = RunCommand(
      {BinPath("yard-server"), "--state-dir", dir().Subdir("s"), "--listen",
       "0.0.0.0:0", "--metrics-listen", ""},
      dir().LogPrefix("yard-server"), Scaled(absl::Seconds(30)));
  EXPECT_EQ(r.exit_code(), 2) << r.DebugString();
  EXPECT_THAT(r.err, HasSubstr("needs TLS"));
}

// Certificate and key files that are swapped, mismatched or not what the
// flag wants are named at start (exit 2 for the daemons, 3 for the CLI), one
// line, before anything is created; not "address in use?", endless
// retries or "cannot reach".
TEST_F(SecurityTest, BadTlsFilesAreNamedAtStart) {
  YARD_ASSIGN_OR_FAIL(TestCertificates c,
                      MakeTestCertificates(dir().Subdir("certs")));
  const std::string state = dir().Subdir("bad-tls-state");
  struct Case {
    std::vector<std::string> tls;
    std::string says;
  };
  const Case server_cases[] = {
      {{"--tls-cert", c.server_key, "--tls-key", c.server_cert},
       "--tls-cert " + c.server_key +
           ": holds no PEM certificate (it is a "
           "private key)"},
      {{"--tls-cert", c.server_cert, "--tls-key", c.client_key},
       "--tls-key " + c.client_key + " is not the key of the certificate"},
      {{"--tls-cert", c.server_cert, "--tls-key", c.server_key,
        "--tls-client-ca", c.server_key},
       "--tls-client-ca " + c.server_key + ": holds no PEM certificate"},
      {{"--tls-cert", c.server_cert}, "--tls-cert needs --tls-key"},
  };
  for (const Case& bad : server_cases) {
    std::vector<std::string> argv = {
        BinPath("yard-server"), "--state-dir",      state, "--listen",
        "127.0.0.1:0",          "--metrics-listen", ""};
    argv.insert(argv.end(), bad.tls.begin(), bad.tls.end());
    CommandResult r = RunCommand(argv, dir().LogPrefix("yard-server-bad-tls"),
                                 Scaled(absl::Seconds(30)));
    EXPECT_EQ(r.exit_code(), 2) << r.DebugString();
    EXPECT_THAT(r.err, HasSubstr(bad.says)) << r.DebugString();
    EXPECT_FALSE(std::filesystem::exists(state + "/trainyard.db"))
        << "checked before the state dir is set up";
  }
  const std::string token_file = dir().Subdir("bad-tls-worker") + "/token";
  std::ofstream(token_file) << "ytk_x\n";
  CommandResult worker = RunCommand(
      {BinPath("yard-worker"), "--server", "127.0.0.1:1", "--tls-ca", c.ca,
       "--tls-cert", c.client_key, "--tls-key", c.client_cert, "--token-file",
       token_file, "--work-dir", dir().Subdir("bad-tls-worker"),
       "--metrics-listen", ""},
      dir().LogPrefix("yard-worker-bad-tls"), Scaled(absl::Seconds(30)));
  EXPECT_EQ(worker.exit_code(), 2) << worker.DebugString();
  EXPECT_THAT(worker.err, HasSubstr("--tls-cert " + c.client_key +
                                    ": holds no PEM certificate"));
  CommandResult cli =
      RunCommand({BinPath("yard"), "--server", "127.0.0.1:1", "--tls-ca",
                  c.server_key, "--token", "x", "ls"},
                 dir().LogPrefix("yard-bad-tls"), Scaled(absl::Seconds(30)));
  EXPECT_EQ(cli.exit_code(), 3) << cli.DebugString();
  EXPECT_EQ(cli.err, "yard: error: --tls-ca " + c.server_key +
                         ": holds no PEM certificate (it is a private key)\n");
}

TEST_F(SecurityTest, TlsAndWorkerMutualTls) {
  const absl::Time start = absl::Now();
  YARD_ASSIGN_OR_FAIL(TestCertificates c,
                      MakeTestCertificates(dir().Subdir("certs")));
  YARD_ASSERT_OK(StartServer(
      {.tls_ca = c.ca,
       .extra_args = {"--tls-cert", c.server_cert, "--tls-key", c.server_key,
                      "--tls-client-ca", c.ca}}));
  // Clients over TLS with the CA; plaintext and a wrong CA get nowhere.
  EXPECT_EQ(Yard({"--tls-ca", c.ca, "ls"}).exit_code(), 0);
  // Each failure is one line saying why (gRPC's handshake logs are kept
  // off the CLI's stderr).
  CommandResult plain = Yard({"ls"});
  EXPECT_EQ(plain.exit_code(), 6);
  EXPECT_THAT(plain.err, HasSubstr("(a TLS server? give --tls-ca)\n"));
  EXPECT_EQ(std::count(plain.err.begin(), plain.err.end(), '\n'), 1)
      << plain.err;
  CommandResult rogue_ca = Yard({"--tls-ca", c.rogue_ca, "ls"});
  EXPECT_EQ(rogue_ca.exit_code(), 6);
  EXPECT_THAT(rogue_ca.err,
              HasSubstr("its TLS certificate does not verify with the CA of "
                        "--tls-ca"));
  EXPECT_EQ(std::count(rogue_ca.err.begin(), rogue_ca.err.end(), '\n'), 1)
      << rogue_ca.err;

  // A worker with a certificate the CA signed joins.
  YARD_ASSERT_OK(StartReadyWorker(
                     {.name = "good",
                      .extra_args = {"--tls-ca", c.ca, "--tls-cert",
                                     c.client_cert, "--tls-key", c.client_key}})
                     .status());
  // Without a certificate, or with one from another CA, it does not.
  YARD_ASSIGN_OR_FAIL(WorkerProcess * bare,
                      StartWorker({.name = "bare",
                                   .extra_args = {"--tls-ca", c.ca}}));
  YARD_ASSIGN_OR_FAIL(
      WorkerProcess * rogue,
      StartWorker({.name = "rogue",
                   .extra_args = {"--tls-ca", c.ca, "--tls-cert",
                                  c.rogue_client_cert, "--tls-key",
                                  c.rogue_client_key}}));
  YARD_ASSERT_OK(PollUntil(
      "the certificate-less worker to be refused", Scaled(absl::Seconds(20)),
      [&] {
        return server().process().OutputTail(10000).find(
                   "refused a worker connection") != std::string::npos;
      }));
  EXPECT_THAT(server().process().OutputTail(10000),
              HasSubstr("must present a client certificate"));
  YARD_ASSERT_OK(PollUntil("the worker to say why it was refused",
                           Scaled(absl::Seconds(20)), [&] {
                             return bare->process().OutputTail().find(
                                        "refused this worker") !=
                                    std::string::npos;
                           }));
  std::optional<ExitStatus> bare_exit =
      bare->process().WaitForExit(Scaled(absl::Seconds(30)));
  ASSERT_TRUE(bare_exit.has_value()) << "a refused worker exits";
  EXPECT_TRUE(bare_exit->Exited(3)) << bare_exit->ToString();
  YARD_ASSERT_OK(PollUntil("the rogue worker to fail its handshake",
                           Scaled(absl::Seconds(20)), [&] {
                             return rogue->process().OutputTail().find(
                                        "cannot reach") != std::string::npos;
                           }));
  EXPECT_THAT(rogue->process().OutputTail(),
              HasSubstr("closed the connection in the TLS handshake (does it "
                        "trust the CA that signed --tls-cert?"));
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(cluster()
                  .ListWorkers(ContextWithTimeout().get(),
                               v1::ListWorkersRequest(), &workers)
                  .ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).id(), "good");
  // A job runs over the mTLS link end to end.
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse sub,
                      Submit(MnistSpec{.steps = 20}.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job done,
                      WaitForTerminal(jobs(), sub.job().id(), JobTimeout()));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.state_reason();
  // The rogue worker failed its handshake on every retry, about one a
  // second; the server's log (gRPC's lines routed through ours) shows the
  // failure once a minute at most, beside the plaintext client's.
  const int64_t minutes = absl::ToInt64Minutes(absl::Now() - start);
  const std::string server_log = server().process().OutputTail(1 << 20);
  int64_t handshake_lines = 0;
  for (size_t at = server_log.find("Handshake failed"); at != std::string::npos;
       at = server_log.find("Handshake failed", at + 1)) {
    ++handshake_lines;
  }
  EXPECT_GE(handshake_lines, 1) << server_log;
  EXPECT_LE(handshake_lines, 2 + 2 * minutes) << server_log;
}

}  // namespace
}  // namespace trainyard::itest
