// The worker protocol: hello, leases, fencing, and re-attaching after a
// broken stream or a server restart. Time is a FakeClock.
#include "server/worker_session.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

class WorkerSessionTest : public ServerLogicTest {
 protected:
  // A job runs on worker w1, which `talks` (about the job) every 8 s for
  // 24 s (its lease is 10 s), then falls silent for a lease. The job as it
  // was while w1 talked, and after the silence.
  std::pair<JobRecord, JobRecord> TalkThenFallSilent(
      const std::function<void(FakeWorker&, const std::string&)>& talk) {
    const std::string id = Submit();
    FakeWorker& w1 = Connect("w1");
    Pass();
    EXPECT_TRUE(w1.Started(id, 1).ok());
    for (int i = 0; i < 3; ++i) {
      clock_.Advance(absl::Seconds(8));
      talk(w1, id);
      Pass();
    }
    JobRecord talking = Job(id);
    clock_.Advance(kLease);
    Pass();
    return {std::move(talking), Job(id)};
  }
};

// A numbered report of attempt `attempt`: `fill` sets its payload.
v1::WorkerMessage Numbered(const std::string& job, int attempt,
                           int64_t sequence,
                           const std::function<void(v1::JobUpdate&)>& fill) {
  v1::WorkerMessage m;
  m.mutable_update()->set_job_id(job);
  m.mutable_update()->set_attempt(attempt);
  m.mutable_update()->set_sequence(sequence);
  fill(*m.mutable_update());
  return m;
}

void Checkpoint(v1::JobUpdate& u) {
  u.mutable_trainer()->mutable_checkpoint()->set_step(100);
}
void Finished(v1::JobUpdate& u) {
  u.mutable_trainer()->mutable_finished()->set_step(200);
}
void ExitedOk(v1::JobUpdate& u) { u.mutable_exited()->set_exit_code(0); }

v1::WorkerMessage NumberedHeartbeat(int64_t sequence) {
  v1::WorkerMessage m;
  m.mutable_heartbeat()->set_sequence(sequence);
  return m;
}

// The HeartbeatAcks among what the server sent since the last call.
std::vector<v1::HeartbeatAck> Acks(FakeWorker& w) {
  std::vector<v1::HeartbeatAck> out;
  for (auto& m : w.link->Take()) {
    if (m.has_heartbeat_ack()) out.push_back(m.heartbeat_ack());
  }
  return out;
}

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
  h.add_devices()->set_memory_bytes(-1);
  EXPECT_THAT(ValidateHello(h, o).message(),
              HasSubstr("hello.devices: device 0 has negative memory_bytes"));
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
  EXPECT_TRUE(sent[0].hello_ack().acks_heartbeats());
}

TEST_F(WorkerSessionTest, HeartbeatsKeepTheLeaseAndSilenceLosesTheWorker) {
  auto [talking, silent] =
      TalkThenFallSilent([](FakeWorker& w, const std::string& job) {
        EXPECT_TRUE(w.Heartbeat({{job, 1}}).ok());
      });
  EXPECT_EQ(talking.job.state(), v1::RUNNING);
  EXPECT_EQ(silent.job.state(), v1::QUEUED);
  // The attempt keeps why it ended; the job's reason is now why it waits.
  EXPECT_EQ(silent.job.attempts(0).reason(), "worker w1 lost");
  EXPECT_EQ(silent.job.attempts(0).outcome(), v1::QUEUED);
}

// A message heard but not yet handled (the stream's handling waits) keeps
// the lease as a handled one does.
TEST_F(WorkerSessionTest, AMessageHeardRenewsTheLeaseBeforeItIsHandled) {
  auto [talking, silent] = TalkThenFallSilent(
      [](FakeWorker& w, const std::string&) { w.session->Heard(); });
  EXPECT_EQ(talking.job.state(), v1::RUNNING);
  EXPECT_EQ(silent.job.state(), v1::QUEUED);
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
  w.session->Close();                // the stream breaks while the job finishes
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

// Two worker processes with one worker id: the second is refused while the
// first is connected (they would otherwise replace each other's stream in
// turn, and the jobs of each would be lost); a reconnect of the first
// process replaces its stream; once the first is gone the second may come.
TEST_F(WorkerSessionTest, ASecondProcessWithTheSameIdIsRefused) {
  auto connect = [&](const std::string& instance,
                     std::shared_ptr<FakeWorkerLink> link) {
    auto session = std::make_unique<WorkerSession>(
        store_.get(), registry_.get(), lifecycle_.get(), link,
        WorkerSessionOptions{}, nullptr);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id("w4");
    hello.mutable_hello()->set_hostname("node-7");
    hello.mutable_hello()->set_cpu_slots(1);
    hello.mutable_hello()->set_instance_id(instance);
    absl::Status status = session->Handle(hello);
    return std::make_pair(std::move(session), status);
  };
  auto first_link = std::make_shared<FakeWorkerLink>();
  auto [first, ok] = connect("aaaa", first_link);
  ASSERT_TRUE(ok.ok()) << ok;
  auto second_link = std::make_shared<FakeWorkerLink>();
  auto [second, refused] = connect("bbbb", second_link);
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.message(),
              HasSubstr("worker id w4 is in use by another worker process "
                        "(on node-7, connected since "));
  EXPECT_FALSE(first_link->closed());
  second.reset();  // its end must not detach the first
  EXPECT_TRUE(registry_->Find("w4")->connected);
  EXPECT_EQ(registry_->Find("w4")->hello.instance_id(), "aaaa");
  // The first process again (a new stream): it replaces its old one.
  auto again_link = std::make_shared<FakeWorkerLink>();
  auto [again, replaced] = connect("aaaa", again_link);
  ASSERT_TRUE(replaced.ok()) << replaced;
  EXPECT_TRUE(first_link->closed());
  first.reset();
  // Gone: another process may take the id.
  again.reset();
  EXPECT_FALSE(registry_->Find("w4")->connected);
  auto [third, taken] = connect("bbbb", std::make_shared<FakeWorkerLink>());
  EXPECT_TRUE(taken.ok()) << taken;
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

// A worker that shut down (said so, then closed its stream) left: once its
// lease has run out it is forgotten, not LOST (an alert would never clear).
// One that said so but then fell silent while connected is lost as ever.
TEST_F(WorkerSessionTest, AWorkerThatShutDownIsForgottenNotLost) {
  FakeWorker& w1 = Connect("w1");
  FakeWorker& w2 = Connect("w2");
  v1::WorkerMessage bye;
  bye.mutable_heartbeat()->set_draining(true);
  ASSERT_TRUE(w1.session->Handle(bye).ok());
  ASSERT_TRUE(w2.session->Handle(bye).ok());
  w1.session->Close();
  Pass();
  EXPECT_EQ(registry_->Find("w1")->state, v1::WORKER_DRAINING)
      << "kept until its lease runs out";
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  EXPECT_FALSE(registry_->Find("w1").has_value());
  EXPECT_EQ(registry_->Find("w2")->state, v1::WORKER_LOST);
  // Back again: a worker like any other.
  FakeWorker& again = Connect("w1");
  const std::string id = Submit();
  Pass();
  EXPECT_EQ(registry_->Find("w1")->state, v1::WORKER_READY);
  EXPECT_EQ(again.Assignments().size(), 1u);
  EXPECT_EQ(Job(id).job.worker_id(), "w1");
}

int CountTrainer(const std::vector<v1::JobEvent>& events,
                 v1::TrainerEvent::EventCase kind) {
  int n = 0;
  for (const v1::JobEvent& e : events) {
    n += e.has_trainer() && e.trainer().event_case() == kind;
  }
  return n;
}

TEST_F(WorkerSessionTest, EveryHeartbeatIsAnsweredWithTheReportsProcessed) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  w.link->Take();
  ASSERT_TRUE(w.Send(NumberedHeartbeat(1)).ok());
  std::vector<v1::HeartbeatAck> acks = Acks(w);
  ASSERT_EQ(acks.size(), 1u) << "answered even with nothing to acknowledge";
  EXPECT_EQ(acks[0].heartbeat_sequence(), 1);
  EXPECT_EQ(acks[0].reports_size(), 0);

  ASSERT_TRUE(w.Send(Numbered(id, 1, 1, Checkpoint)).ok());
  ASSERT_TRUE(w.Send(Numbered(id, 1, 2, Checkpoint)).ok());
  // A stale attempt is processed too: the worker may forget its reports.
  ASSERT_TRUE(w.Send(Numbered(id, 7, 4, Checkpoint)).ok());
  ASSERT_TRUE(w.Send(NumberedHeartbeat(2)).ok());
  acks = Acks(w);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].heartbeat_sequence(), 2);
  ASSERT_EQ(acks[0].reports_size(), 2);
  EXPECT_EQ(acks[0].reports(0).job_id(), id);
  EXPECT_EQ(acks[0].reports(0).attempt(), 1);
  EXPECT_EQ(acks[0].reports(0).sequence(), 2);
  EXPECT_EQ(acks[0].reports(1).attempt(), 7);
  EXPECT_EQ(acks[0].reports(1).sequence(), 4);

  ASSERT_TRUE(w.Send(NumberedHeartbeat(3)).ok());
  acks = Acks(w);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].reports_size(), 0) << "each report acknowledged once";

  // Log bytes are not numbered and not acknowledged; what the worker
  // processed before closing its side is acknowledged at the close.
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) { u.set_log("x\n"); }).ok());
  ASSERT_TRUE(w.Send(Numbered(id, 1, 3, ExitedOk)).ok());
  w.session->FlushAcks();
  acks = Acks(w);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].heartbeat_sequence(), 0);
  ASSERT_EQ(acks[0].reports_size(), 1);
  EXPECT_EQ(acks[0].reports(0).sequence(), 3);
  w.session->FlushAcks();
  EXPECT_TRUE(Acks(w).empty()) << "nothing left to acknowledge";
}

TEST_F(WorkerSessionTest, ReportsSentAgainAfterAReconnectAreAppliedOnce) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  const std::vector<std::function<void(v1::JobUpdate&)>> reports = {
      [](v1::JobUpdate& u) { u.mutable_started()->set_pid(7); }, Checkpoint,
      Finished};
  for (size_t i = 0; i < reports.size(); ++i) {
    ASSERT_TRUE(w.Send(Numbered(id, 1, i + 1, reports[i])).ok());
  }
  // The stream breaks before the worker hears an ack: it sends all three
  // again on the next one, then the exit.
  w.session->Close();
  FakeWorker& back = Connect("w1", 1, 0, {{id, 1}});
  for (size_t i = 0; i < reports.size(); ++i) {
    ASSERT_TRUE(back.Send(Numbered(id, 1, i + 1, reports[i])).ok());
  }
  EXPECT_TRUE(Stops(back).empty()) << "a duplicate is not a stale attempt";
  ASSERT_TRUE(back.Send(Numbered(id, 1, 4, ExitedOk)).ok());

  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::SUCCEEDED);
  EXPECT_EQ(r.job.attempts(0).last_report_sequence(), 4);
  auto events = store_->ReadEvents(id, 0, 1000);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(CountTrainer(*events, v1::TrainerEvent::kCheckpoint), 1);
  EXPECT_EQ(CountTrainer(*events, v1::TrainerEvent::kFinished), 1);
  ASSERT_TRUE(back.Send(NumberedHeartbeat(1)).ok());
  std::vector<v1::HeartbeatAck> acks = Acks(back);
  ASSERT_EQ(acks.size(), 1u);
  ASSERT_EQ(acks[0].reports_size(), 1);
  EXPECT_EQ(acks[0].reports(0).sequence(), 4) << "duplicates are acknowledged";
}

TEST_F(WorkerSessionTest, DuplicatesAreDroppedAcrossAServerRestart) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Send(Numbered(id, 1, 1, Checkpoint)).ok());
  ASSERT_TRUE(w.Send(Numbered(id, 1, 2, Finished)).ok());
  Boot();  // the server dies before it acknowledged anything
  FakeWorker& back = Connect("w1", 1, 0, {{id, 1}});
  ASSERT_TRUE(back.Send(Numbered(id, 1, 1, Checkpoint)).ok());
  ASSERT_TRUE(back.Send(Numbered(id, 1, 2, Finished)).ok());
  ASSERT_TRUE(back.Send(Numbered(id, 1, 3, ExitedOk)).ok());
  auto events = store_->ReadEvents(id, 0, 1000);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(CountTrainer(*events, v1::TrainerEvent::kCheckpoint), 1);
  EXPECT_EQ(CountTrainer(*events, v1::TrainerEvent::kFinished), 1);
  EXPECT_EQ(Job(id).job.state(), v1::SUCCEEDED);
}

TEST_F(WorkerSessionTest, UnnumberedReportsAreAlwaysApplied) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Send(Numbered(id, 1, 0, Checkpoint)).ok());
  ASSERT_TRUE(w.Send(Numbered(id, 1, 0, Checkpoint)).ok());
  auto events = store_->ReadEvents(id, 0, 1000);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(CountTrainer(*events, v1::TrainerEvent::kCheckpoint), 2);
  EXPECT_EQ(Job(id).job.attempts(0).last_report_sequence(), 0);
}

TEST_F(WorkerSessionTest, AnExitForLostContactPutsTheJobBackInTheQueue) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1", 2);
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  auto lost = [](v1::JobUpdate& u) {
    u.mutable_exited()->set_signal(9);
    u.mutable_exited()->set_lost_server(true);
  };
  ASSERT_TRUE(w.Send(Numbered(id, 1, 2, lost)).ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED) << "not FAILED: it resumes";
  EXPECT_THAT(r.job.attempts(0).reason(),
              HasSubstr("lost contact with the server"));
  // Sent again (its ack was lost): nothing more happens.
  ASSERT_TRUE(w.Send(Numbered(id, 1, 2, lost)).ok());
  EXPECT_EQ(Job(id).job.attempts_size(), 1);
  // Nor for a job the server does not know.
  ASSERT_TRUE(w.Send(Numbered("j-000404", 1, 1, lost)).ok());

  // After the lease ran out the job was given back already: a no-op.
  const std::string other = Submit();
  Pass();
  ASSERT_EQ(Job(other).job.worker_id(), "w1");
  const int attempt = Job(other).job.attempt();
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  ASSERT_EQ(Job(other).job.state(), v1::QUEUED);
  FakeWorker& back = Connect("w1", 2, 0, {{other, attempt}});
  ASSERT_TRUE(back.Send(Numbered(other, attempt, 1, lost)).ok());
  EXPECT_EQ(Job(other).job.attempts_size(), attempt);
  EXPECT_EQ(Job(other).job.attempts(attempt - 1).reason(), "worker w1 lost");
}

// Stands in for a slow policy: Place() blocks until released.
class BlockingPolicy : public scheduler::PlacementPolicy {
 public:
  std::string_view name() const override { return "blocking"; }
  scheduler::Plan Place(const scheduler::ClusterSnapshot&) const override {
    absl::MutexLock lock(&mu_);
    entered_ = true;
    mu_.Await(absl::Condition(&released_));
    return {};
  }
  void AwaitEntered() const {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&entered_));
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

 private:
  mutable absl::Mutex mu_;
  mutable bool entered_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// The RPC threads (workers' streams, job submissions and reads) never wait
// for a scheduling pass: the pass holds no lock they need while it runs.
TEST_F(WorkerSessionTest, WorkersAndClientsAreServedWhileAPassIsInThePolicy) {
  const std::string running = Submit();
  FakeWorker& w = Connect("w1", 2);
  Pass();
  ASSERT_TRUE(w.Started(running, 1).ok());
  Submit();  // queued, so the pass reaches the policy

  BlockingPolicy policy;
  SchedulerLoop loop(store_.get(), registry_.get(), lifecycle_.get(), &policy,
                     &clock_, SchedulerLoopOptions{});
  absl::Status pass_status;
  std::thread pass([&] { pass_status = loop.RunPass(); });
  policy.AwaitEntered();
  // All of this completes while the pass is stuck in the policy.
  ASSERT_TRUE(w.Send(NumberedHeartbeat(1)).ok());
  ASSERT_TRUE(w.Send(Numbered(running, 1, 1, Checkpoint)).ok());
  const std::string submitted = Submit();
  EXPECT_EQ(Job(submitted).job.state(), v1::QUEUED);
  ASSERT_TRUE(lifecycle_->Cancel(submitted, "changed my mind").ok());
  EXPECT_EQ(registry_->List().size(), 1u);
  FakeWorker& other = Connect("w2");
  ASSERT_TRUE(other.Heartbeat().ok());
  ASSERT_TRUE(w.Exited(running, 1, 0).ok());
  EXPECT_EQ(Job(running).job.state(), v1::SUCCEEDED);
  policy.Release();
  pass.join();
  EXPECT_TRUE(pass_status.ok()) << pass_status;
}

}  // namespace
}  // namespace trainyard::server
