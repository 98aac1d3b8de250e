// The worker protocol: hello, leases, fencing, and re-attaching after a
// broken stream or a server restart. Time is a FakeClock.
#include "server/worker_session.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

using WorkerSessionTest = ServerLogicTest;

std::vector<v1::StopAttempt> Stops(FakeWorker& w) {
  std::vector<v1::StopAttempt> out;
  for (auto& m : w.link->Take()) {
    if (m.has_stop_attempt()) out.push_back(m.stop_attempt());
  }
  return out;
}

TEST_F(WorkerSessionTest, FirstMessageMustBeAHello) {
  auto link = std::make_shared<FakeWorkerLink>();
  WorkerSession session(store_.get(), registry_.get(), lifecycle_.get(), link,
                        WorkerSessionOptions{}, nullptr);
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  absl::Status s = session.Handle(heartbeat);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("WorkerHello"));
  EXPECT_TRUE(registry_->List().empty());
}

TEST_F(WorkerSessionTest, MalformedHellosAreInvalidArgumentNamingTheField) {
  WorkerSessionOptions o;
  auto hello = [] {
    v1::WorkerHello h;
    h.set_worker_id("w1");
    h.set_cpu_slots(1);
    return h;
  };
  EXPECT_TRUE(ValidateHello(hello(), o).ok());
  v1::WorkerHello h = hello();
  h.set_worker_id("");
  EXPECT_THAT(ValidateHello(h, o).message(), HasSubstr("hello.worker_id"));
  h.set_worker_id("bad id/..");
  EXPECT_THAT(ValidateHello(h, o).message(), HasSubstr("hello.worker_id"));
  h = hello();
  h.set_cpu_slots(-1);
  EXPECT_THAT(ValidateHello(h, o).message(), HasSubstr("hello.cpu_slots"));
  h = hello();
  h.add_devices()->set_index(0);
  h.add_devices()->set_index(0);
  EXPECT_THAT(ValidateHello(h, o).message(), HasSubstr("hello.devices"));
  h = hello();
  h.add_running()->set_job_id("j-000001");  // attempt 0
  EXPECT_THAT(ValidateHello(h, o).message(), HasSubstr("hello.running"));

  FakeWorker& w = Connect("w1");
  v1::WorkerMessage again;
  *again.mutable_hello() = hello();
  EXPECT_EQ(w.Send(again).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkerSessionTest, HelloAckCarriesHeartbeatAndLease) {
  FakeWorker& w = Connect("w1");
  auto sent = w.link->Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].hello_ack().heartbeat_interval_ms(), 1000);
  EXPECT_EQ(sent[0].hello_ack().lease_ms(), 10000);
}

TEST_F(WorkerSessionTest, HeartbeatsKeepTheLeaseAndSilenceLosesTheWorker) {
  const std::string id = Submit();
  FakeWorker& w1 = Connect("w1");
  Pass();
  ASSERT_TRUE(w1.Started(id, 1).ok());
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(8));
    ASSERT_TRUE(w1.Heartbeat({{id, 1}}).ok());
    Pass();
  }
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);

  clock_.Advance(kLease);
  Pass();
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  // The attempt keeps why it ended; the job's reason is now why it waits.
  EXPECT_EQ(r.job.attempts(0).reason(), "worker w1 lost");
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("no worker"));
  EXPECT_EQ(registry_->Find("w1")->state, v1::WORKER_LOST);
  EXPECT_TRUE(w1.link->closed());
  EXPECT_EQ(w1.Heartbeat().code(), absl::StatusCode::kAborted);

  // Another worker resumes it: a new attempt, the same checkpoint dir.
  FakeWorker& w2 = Connect("w2");
  Pass();
  auto a = w2.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].attempt(), 2);
  EXPECT_EQ(a[0].checkpoint_dir(), r.job.checkpoint_dir());
  ASSERT_TRUE(w2.Started(id, 2).ok());

  // The lost worker comes back still running attempt 1: it is told to stop,
  // and its late exit does not touch the job.
  FakeWorker& back = Connect("w1", 1, 0, {{id, 1}});
  auto stops = Stops(back);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].attempt(), 1);
  ASSERT_TRUE(back.Exited(id, 1, 1, "killed").ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  EXPECT_EQ(Job(id).job.worker_id(), "w2");
}

TEST_F(WorkerSessionTest, JobsOfALostWorkerAreSettledEvenAfterAFailedWrite) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  clock_.Advance(kLease + absl::Seconds(1));
  fail_writes_ = true;
  EXPECT_EQ(loop_->RunPass().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);  // nothing half-written
  EXPECT_EQ(registry_->Find("w1")->state, v1::WORKER_LOST);
  fail_writes_ = false;
  Pass();  // the worker was lost a pass ago; its job is still given back
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
}

TEST_F(WorkerSessionTest, ServerRestartReattachesRunningJobsAndSettlesTheRest) {
  const std::string a = Submit();
  const std::string b = Submit();
  FakeWorker& w1 = Connect("w1", 2);
  Pass();
  ASSERT_TRUE(w1.Started(a, 1).ok());  // b stays SCHEDULED
  const std::string c = Submit();
  FakeWorker& w2 = Connect("w2");
  Pass();
  ASSERT_TRUE(w2.Started(c, 1).ok());

  Boot();  // the server restarts; the store is all that is left
  EXPECT_EQ(registry_->List().size(), 2u);  // both awaited with fresh leases
  clock_.Advance(kLease - absl::Seconds(1));
  Pass();
  EXPECT_EQ(Job(c).job.state(), v1::RUNNING);  // w2 still has time

  FakeWorker& back = Connect("w1", 2, 0, {{a, 1}});
  EXPECT_TRUE(Stops(back).empty());
  EXPECT_EQ(Job(a).job.state(), v1::RUNNING);
  EXPECT_EQ(Job(b).job.state(), v1::SCHEDULED);  // settled at the heartbeat
  ASSERT_TRUE(back.Heartbeat({{a, 1}}).ok());
  EXPECT_EQ(Job(b).job.state(), v1::QUEUED);
  EXPECT_THAT(Job(b).job.state_reason(), HasSubstr("reconnected without it"));

  clock_.Advance(absl::Seconds(2));  // w2's lease from the restart runs out
  ASSERT_TRUE(back.Heartbeat({{a, 1}}).ok());
  Pass();
  EXPECT_EQ(Job(c).job.state(), v1::QUEUED);
  EXPECT_EQ(Job(c).job.attempts(0).reason(), "worker w2 lost");
  EXPECT_EQ(Job(a).job.state(), v1::RUNNING);
  ASSERT_TRUE(back.Exited(a, 1, 0).ok());
  EXPECT_EQ(Job(a).job.state(), v1::SUCCEEDED);
}

TEST_F(WorkerSessionTest, ReattachedScheduledJobBecomesRunning) {
  const std::string id = Submit();
  Connect("w1");
  Pass();
  Boot();
  Connect("w1", 1, 0, {{id, 1}});
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::RUNNING);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("re-attached"));
}

TEST_F(WorkerSessionTest, ExitReportedAfterReconnectWinsOverRequeue) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  w.session->Close();  // the stream breaks while the job finishes
  FakeWorker& back = Connect("w1");  // no longer running it
  ASSERT_TRUE(back.Exited(id, 1, 0).ok());
  ASSERT_TRUE(back.Heartbeat().ok());
  EXPECT_EQ(Job(id).job.state(), v1::SUCCEEDED);
}

TEST_F(WorkerSessionTest, PendingCancelIsSentAgainOnReattach) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  w.session->Close();
  ASSERT_EQ(lifecycle_->Cancel(id, "stop")->state(), v1::RUNNING);
  FakeWorker& back = Connect("w1", 1, 0, {{id, 1}});
  bool cancel_sent = false;
  for (auto& m : back.link->Take()) cancel_sent |= m.has_cancel();
  EXPECT_TRUE(cancel_sent);
  ASSERT_TRUE(back.Exited(id, 1, 3, "", true).ok());
  EXPECT_EQ(Job(id).job.state(), v1::CANCELLED);
  EXPECT_EQ(Job(id).job.state_reason(), "stop");
}

TEST_F(WorkerSessionTest, HeartbeatListingStaleAttemptsStopsThem) {
  FakeWorker& w = Connect("w1");
  w.link->Take();
  ASSERT_TRUE(w.Heartbeat({{"j-000404", 3}}).ok());
  auto stops = Stops(w);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].job_id(), "j-000404");
  ASSERT_TRUE(w.Heartbeat({{"j-000404", 3}}).ok());
  EXPECT_TRUE(Stops(w).empty());  // once per session is enough
}

TEST_F(WorkerSessionTest, ANewerConnectionReplacesTheOldOne) {
  FakeWorker& first = Connect("w1");
  std::shared_ptr<FakeWorkerLink> old_link = first.link;
  std::unique_ptr<WorkerSession> old_session = std::move(first.session);
  Connect("w1");  // replaces workers_map_["w1"]
  EXPECT_TRUE(old_link->closed());
  v1::WorkerMessage hb;
  hb.mutable_heartbeat();
  EXPECT_EQ(old_session->Handle(hb).code(), absl::StatusCode::kAborted);
  old_session.reset();  // its Close must not detach the new session
  EXPECT_TRUE(registry_->Find("w1")->connected);
}

TEST_F(WorkerSessionTest, DisconnectedWorkerGetsNoAssignments) {
  FakeWorker& w = Connect("w1");
  w.session->Close();
  const std::string id = Submit();
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
  EXPECT_THAT(Job(id).job.state_reason(), HasSubstr("no worker"));
}

TEST_F(WorkerSessionTest, DrainingWorkerGetsNoAssignmentsUntilItReconnects) {
  FakeWorker& w = Connect("w1");
  v1::WorkerMessage hb;
  hb.mutable_heartbeat()->set_draining(true);
  ASSERT_TRUE(w.session->Handle(hb).ok());
  EXPECT_EQ(registry_->Find("w1")->state, v1::WORKER_DRAINING);
  const std::string id = Submit();
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
  EXPECT_TRUE(w.Assignments().empty());

  FakeWorker& again = Connect("w1");  // restarted: a new hello
  Pass();
  EXPECT_EQ(registry_->Find("w1")->state, v1::WORKER_READY);
  EXPECT_EQ(again.Assignments().size(), 1u);
}

}  // namespace
}  // namespace trainyard::server
