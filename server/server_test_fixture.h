// Test-only: the server's logic wired together in-process without gRPC —
// a real JobStore in a temp dir, a WorkerRegistry and scheduler driven by a
// FakeClock, and fake workers whose links record what the server sent.
// Scheduling passes run only when a test calls Pass(). Not thread-safe.
#ifndef TRAINYARD_SERVER_SERVER_TEST_FIXTURE_H_
#define TRAINYARD_SERVER_SERVER_TEST_FIXTURE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/proto_time.h"
#include "common/test_dir.h"
#include "gtest/gtest.h"
#include "scheduler/first_fit_policy.h"
#include "server/change_notifier.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/scheduler_loop.h"
#include "server/worker_registry.h"
#include "server/worker_session.h"

namespace trainyard::server {

class FakeWorkerLink : public WorkerLink {
 public:
  bool Send(const v1::ServerMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (closed_ || fail_sends_) return false;
    sent_.push_back(message);
    return true;
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    close_status_ = status;
  }
  // Takes what was sent so far.
  std::vector<v1::ServerMessage> Take() {
    absl::MutexLock lock(&mu_);
    return std::exchange(sent_, {});
  }
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  void set_fail_sends(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_sends_ = fail;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::ServerMessage> sent_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_sends_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

// One fake worker: a session plus the link it answers on.
struct FakeWorker {
  std::string id;
  std::shared_ptr<FakeWorkerLink> link;
  std::unique_ptr<WorkerSession> session;

  absl::Status Send(const v1::WorkerMessage& m) { return session->Handle(m); }
  absl::Status Heartbeat(
      std::vector<std::pair<std::string, int>> running = {}) {
    v1::WorkerMessage m;
    m.mutable_heartbeat();
    for (auto& [job, attempt] : running) {
      auto* r = m.mutable_heartbeat()->add_running();
      r->set_job_id(job);
      r->set_attempt(attempt);
    }
    return Send(m);
  }
  absl::Status Update(const std::string& job, int attempt,
                      const std::function<void(v1::JobUpdate&)>& fill) {
    v1::WorkerMessage m;
    m.mutable_update()->set_job_id(job);
    m.mutable_update()->set_attempt(attempt);
    fill(*m.mutable_update());
    return Send(m);
  }
  absl::Status Started(const std::string& job, int attempt) {
    return Update(job, attempt,
                  [](v1::JobUpdate& u) { u.mutable_started()->set_pid(4242); });
  }
  absl::Status Exited(const std::string& job, int attempt, int code,
                      std::string error = "", bool cancelled = false) {
    return Update(job, attempt, [&](v1::JobUpdate& u) {
      u.mutable_exited()->set_exit_code(code);
      u.mutable_exited()->set_error(error);
      u.mutable_exited()->set_cancelled(cancelled);
    });
  }
  // The assignments among what the server sent since the last call.
  std::vector<v1::Assignment> Assignments() {
    std::vector<v1::Assignment> out;
    for (auto& m : link->Take()) {
      if (m.has_assignment()) out.push_back(m.assignment());
    }
    return out;
  }
  // The Preempt messages among what the server sent since the last Take
  // (assignments are dropped).
  std::vector<v1::Preempt> Preempts() {
    std::vector<v1::Preempt> out;
    for (auto& m : link->Take()) {
      if (m.has_preempt()) out.push_back(m.preempt());
    }
    return out;
  }
};

class ServerLogicTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kLease = absl::Seconds(10);

  ServerLogicTest() { Boot(); }

  // (Re)builds everything but the database: a restarted server.
  void Boot() {
    workers_map_.clear();
    loop_.reset();
    lifecycle_.reset();
    registry_.reset();
    store_.reset();
    JobStoreOptions so;
    so.path = dir_.File("trainyard.db");
    so.checkpoint_root = checkpoint_root_;
    so.clock = &clock_;
    so.on_commit = [this](const std::vector<std::string>& job_ids) {
      notifier_.Notify(job_ids);
    };
    so.on_state_change = [this](const v1::StateChange& c) {
      if (on_state_change_) on_state_change_(c);
    };
    so.fault_injector = [this](std::string_view op) {
      return fail_writes_ ? absl::UnavailableError(absl::StrCat(
                                "injected failure: ", std::string(op)))
                          : absl::OkStatus();
    };
    auto store = JobStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    registry_ = std::make_unique<WorkerRegistry>(&clock_, kLease);
    JobLifecycleOptions lo;
    lo.checkpoint_root = checkpoint_root_;
    lo.validation.data_root = dir_.path();
    lo.validation.check_files_exist = false;
    lifecycle_ = std::make_unique<JobLifecycle>(store_.get(), registry_.get(),
                                                &clock_, lo);
    lifecycle_->set_scheduler_wake([this] { ++wakes_; });
    loop_ = std::make_unique<SchedulerLoop>(store_.get(), registry_.get(),
                                            lifecycle_.get(), &policy_, &clock_,
                                            SchedulerLoopOptions{});
    ASSERT_TRUE(lifecycle_->RecoverHeldJobs().ok());
  }

  static v1::JobSpec Spec(int32_t priority = 0, int32_t gpus = 0) {
    v1::JobSpec spec;
    spec.set_name("test");
    spec.mutable_model()->mutable_mlp()->add_hidden(8);
    spec.mutable_data()->mutable_mnist()->set_images("images.gz");
    spec.mutable_data()->mutable_mnist()->set_labels("labels.gz");
    spec.mutable_batch()->set_micro_batch(8);
    spec.set_steps(10);
    spec.set_priority(priority);
    spec.mutable_resources()->set_gpus(gpus);
    return spec;
  }

  std::string Submit(int32_t priority = 0, int32_t gpus = 0,
                     std::string request_id = "") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(priority, gpus);
    req.set_request_id(std::move(request_id));
    auto r = lifecycle_->Submit(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job.id() : "";
  }

  // Connects a worker with `slots` CPU slots and `gpus` GPUs, listing
  // `running` (job, attempt) pairs in its hello; those of the jobs in
  // `ended` as ended then, their exit to come (RunningJobRef.exit_time).
  FakeWorker& Connect(const std::string& id, int slots = 1, int gpus = 0,
                      std::vector<std::pair<std::string, int>> running = {},
                      const std::map<std::string, absl::Time>& ended = {}) {
    v1::WorkerHello hello;
    hello.set_cpu_slots(slots);
    for (int g = 0; g < gpus; ++g) hello.add_devices()->set_index(g);
    for (auto& [job, attempt] : running) {
      auto* r = hello.add_running();
      r->set_job_id(job);
      r->set_attempt(attempt);
      if (auto it = ended.find(job); it != ended.end()) {
        *r->mutable_exit_time() = ToProtoTime(it->second);
      }
    }
    return ConnectWith(id, std::move(hello));
  }

  // Connects worker `id` with `hello` (its worker_id set here).
  FakeWorker& ConnectWith(const std::string& id, v1::WorkerHello hello) {
    FakeWorker& w = workers_map_[id];
    w.id = id;
    w.link = std::make_shared<FakeWorkerLink>();
    w.session = std::make_unique<WorkerSession>(
        store_.get(), registry_.get(), lifecycle_.get(), w.link,
        WorkerSessionOptions{}, [this] { ++wakes_; });
    v1::WorkerMessage message;
    *message.mutable_hello() = std::move(hello);
    message.mutable_hello()->set_worker_id(id);
    absl::Status s = w.session->Handle(message);
    EXPECT_TRUE(s.ok()) << s;
    return w;
  }

  // Moves the clock on by `d`, every connected worker sending a heartbeat
  // at least twice a lease, so none is lost meanwhile.
  void AdvanceWithHeartbeats(absl::Duration d) {
    while (d > absl::ZeroDuration()) {
      const absl::Duration step = std::min(d, kLease / 2);
      clock_.Advance(step);
      d -= step;
      for (auto& [id, w] : workers_map_) {
        absl::Status s = w.Heartbeat();
        ASSERT_TRUE(s.ok()) << id << ": " << s;
      }
    }
  }

  void Pass() {
    absl::Status s = loop_->RunPass();
    ASSERT_TRUE(s.ok()) << s;
  }

  // Submits a job and runs it on `w`, which must have a free slot and be
  // the worker the policy picks.
  std::string RunJobOn(FakeWorker& w, int32_t priority = 0) {
    const std::string job = Submit(priority);
    Pass();
    EXPECT_EQ(w.Assignments().size(), 1u);
    EXPECT_TRUE(w.Started(job, 1).ok());
    EXPECT_EQ(Job(job).job.state(), v1::RUNNING);
    return job;
  }

  JobRecord Job(const std::string& id) {
    auto r = store_->GetJob(id);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : JobRecord{};
  }

  TestDir dir_;
  // The server's checkpoint root; a test may change it before a Boot().
  std::string checkpoint_root_ = dir_.File("ckpt");
  FakeClock clock_;
  ChangeNotifier notifier_;
  scheduler::FirstFitPolicy policy_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<JobLifecycle> lifecycle_;
  std::unique_ptr<SchedulerLoop> loop_;
  int wakes_ = 0;
  bool fail_writes_ = false;  // every store write fails while set
  // Told every committed state change (metrics tests).
  std::function<void(const v1::StateChange&)> on_state_change_;
  std::map<std::string, FakeWorker>
      workers_map_;  // last: sessions use the rest
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SERVER_TEST_FIXTURE_H_
