// ClusterView: the memory a worker reports for its GPUs becomes scheduling
// capacity (so the packing policies share GPUs by memory), what jobs hold
// is taken out of it, and ListWorkers shows each device's capacity with the
// live figures of the latest heartbeat.
#include "server/cluster_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/placement_policy.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

// A GPU as a worker reports it: under NVIDIA MPS unless `mps` is false.
v1::Device Gpu(int32_t index, int64_t memory_bytes, bool mps = true) {
  v1::Device d;
  d.set_mps(mps);
  d.set_index(index);
  d.set_name("NVIDIA H100 80GB HBM3");
  d.set_uuid("GPU-" + std::to_string(index));
  d.set_memory_bytes(memory_bytes);
  d.set_compute_capability(90);
  return d;
}

WorkerStatus Ready(const std::string& id, std::vector<v1::Device> devices) {
  WorkerStatus w;
  w.id = id;
  w.schedulable = true;
  w.hello.set_worker_id(id);
  w.hello.set_cpu_slots(1);
  for (v1::Device& d : devices) *w.hello.add_devices() = std::move(d);
  return w;
}

// A job of `id` holding `gpus` of worker `worker`.
JobRecord Holding(const std::string& id, const std::string& worker,
                  std::vector<int32_t> gpus) {
  JobRecord r;
  r.job.set_id(id);
  r.job.set_worker_id(worker);
  r.job.set_attempt(1);
  r.job.mutable_spec()->mutable_resources()->set_gpus(
      static_cast<int32_t>(gpus.size()));
  r.gpu_indices = std::move(gpus);
  return r;
}

scheduler::PendingJob SmallGpuJob(const std::string& id) {
  scheduler::PendingJob p;
  p.id = id;
  p.gpus = 1;
  p.gpu_memory_bytes = 10 * kGiB;  // the engine's estimate
  p.gpu_memory_estimated = true;
  p.gpu_compute_milli = 0;  // a share in proportion to the memory
  return p;
}

TEST(SchedulableCapacityTest, ReportedMemoryIsEachGpusCapacity) {
  const std::vector<scheduler::WorkerCapacity> c = SchedulableCapacity(
      {Ready("w", {Gpu(1, 80 * kGiB), Gpu(0, 40 * kGiB, /*mps=*/false)})}, {},
      /*share_without_mps=*/false);
  ASSERT_EQ(c.size(), 1u);
  ASSERT_EQ(c[0].devices.size(), 2u);
  EXPECT_EQ(c[0].devices[0].index, 0);  // by index
  EXPECT_EQ(c[0].devices[0].memory_bytes, 40 * kGiB);
  EXPECT_EQ(c[0].devices[0].free_memory_bytes, 40 * kGiB);
  EXPECT_EQ(c[0].devices[1].memory_bytes, 80 * kGiB);
  EXPECT_EQ(c[0].devices[1].free_compute_milli, scheduler::kWholeGpuMilli);
  EXPECT_THAT(c[0].gpus, ElementsAre(0, 1));
  EXPECT_THAT(c[0].free_gpus, ElementsAre(0, 1));
  EXPECT_FALSE(c[0].devices[0].shareable) << "no MPS: its jobs time-slice";
  EXPECT_TRUE(c[0].devices[1].shareable);
  // Each GPU's name, kept once per worker.
  EXPECT_THAT(c[0].gpu_names, ElementsAre("NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(c[0].GpuName(c[0].devices[0]), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(c[0].GpuName(c[0].devices[1]), "NVIDIA H100 80GB HBM3");
}

TEST(SchedulableCapacityTest, WhatJobsHoldIsTakenOut) {
  const std::vector<JobRecord> active = {
      Holding("whole", "w", {0}), Holding("share-a", "w", {1}),
      Holding("share-b", "w", {1}), Holding("unknown-size", "w", {2})};
  const GpuHoldOf hold_of = [](const JobRecord& r) {
    if (r.job.id() == "whole") return GpuHold{};
    return GpuHold{10 * kGiB, 150};
  };
  const std::vector<scheduler::WorkerCapacity> c =
      SchedulableCapacity({Ready("w", {Gpu(0, 80 * kGiB), Gpu(1, 80 * kGiB),
                                       Gpu(2, 0), Gpu(3, 80 * kGiB)})},
                          UsageByWorker(active, hold_of), false);
  ASSERT_EQ(c.size(), 1u);
  const auto& d = c[0].devices;
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].free_memory_bytes, 0);  // held whole
  EXPECT_EQ(d[0].free_compute_milli, 0);
  EXPECT_EQ(d[1].free_memory_bytes, 60 * kGiB);  // two shares
  EXPECT_EQ(d[1].free_compute_milli, 700);
  EXPECT_EQ(d[2].free_compute_milli, 0);  // memory unknown: taken whole
  EXPECT_THAT(c[0].free_gpus, ElementsAre(3));

  // Without a GpuHoldOf every job holds its GPUs whole.
  const std::vector<scheduler::WorkerCapacity> whole =
      SchedulableCapacity({Ready("w", {Gpu(0, 80 * kGiB), Gpu(1, 80 * kGiB)})},
                          UsageByWorker(active), false);
  EXPECT_EQ(whole[0].devices[1].free_memory_bytes, 0);
  EXPECT_EQ(whole[0].devices[1].free_compute_milli, 0);
}

TEST(SchedulableCapacityTest, PackingSharesAGpuByReportedMemory) {
  auto policy = scheduler::MakePlacementPolicy("best-fit");
  ASSERT_TRUE(policy.ok()) << policy.status();
  auto placed_on = [&](int64_t gpu_memory, bool mps = true,
                       bool share_without_mps = false) {
    auto snapshot = scheduler::ClusterSnapshot::Create(
        SchedulableCapacity({Ready("w", {Gpu(0, gpu_memory, mps)})}, {},
                            share_without_mps),
        {SmallGpuJob("a"), SmallGpuJob("b"), SmallGpuJob("c")});
    EXPECT_TRUE(snapshot.ok()) << snapshot.status();
    return (*policy)->Place(*snapshot).placements.size();
  };
  EXPECT_EQ(placed_on(80 * kGiB), 3u);  // three 10 GiB jobs share the GPU
  EXPECT_EQ(placed_on(0), 1u);          // size unknown: one job, whole GPU
  // Without MPS the driver would time-slice them: one job takes it whole,
  // unless the server shares such GPUs too (--share-gpus always).
  EXPECT_EQ(placed_on(80 * kGiB, /*mps=*/false), 1u);
  EXPECT_EQ(placed_on(80 * kGiB, /*mps=*/false, /*share_without_mps=*/true),
            3u);
}

using ClusterViewTest = ServerLogicTest;

TEST_F(ClusterViewTest, ListWorkersShowsCapacityWithTheLatestFigures) {
  FakeWorker& w = workers_map_["gpu-1"];
  w.id = "gpu-1";
  w.link = std::make_shared<FakeWorkerLink>();
  w.session = std::make_unique<WorkerSession>(store_.get(), registry_.get(),
                                              lifecycle_.get(), w.link,
                                              WorkerSessionOptions{}, nullptr);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id("gpu-1");
  hello.mutable_hello()->set_cpu_slots(1);
  *hello.mutable_hello()->add_devices() = Gpu(0, 80 * kGiB);
  *hello.mutable_hello()->add_devices() = Gpu(1, 80 * kGiB);
  ASSERT_TRUE(w.Send(hello).ok());

  ClusterView view(store_.get(), registry_.get(), "test");
  auto before = view.ListWorkers();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->size(), 1u);
  EXPECT_EQ((*before)[0].devices(1).memory_bytes(), 80 * kGiB);
  EXPECT_EQ((*before)[0].devices(1).utilization_percent(), 0);  // none yet

  v1::WorkerMessage beat;
  v1::Device* live = beat.mutable_heartbeat()->add_devices();
  live->set_index(1);
  live->set_memory_used_bytes(12 * kGiB);
  live->set_utilization_percent(87);
  live->set_temperature_celsius(64);
  live->set_power_milliwatts(412000);
  live->set_memory_bytes(1);  // a heartbeat cannot change the capacity
  beat.mutable_heartbeat()->add_devices()->set_index(9);  // not in the hello
  ASSERT_TRUE(w.Send(beat).ok());

  auto after = view.ListWorkers();
  ASSERT_TRUE(after.ok()) << after.status();
  const v1::Worker& shown = (*after)[0];
  ASSERT_EQ(shown.devices_size(), 2);
  EXPECT_EQ(shown.devices(0).utilization_percent(), 0);
  const v1::Device& d1 = shown.devices(1);
  EXPECT_EQ(d1.name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d1.uuid(), "GPU-1");
  EXPECT_EQ(d1.memory_bytes(), 80 * kGiB);
  EXPECT_EQ(d1.compute_capability(), 90);
  EXPECT_EQ(d1.memory_used_bytes(), 12 * kGiB);
  EXPECT_EQ(d1.utilization_percent(), 87);
  EXPECT_EQ(d1.temperature_celsius(), 64);
  EXPECT_EQ(d1.power_milliwatts(), 412000);
  EXPECT_EQ(registry_->Find("gpu-1")->device_figures.size(), 1u);

  // The next heartbeat replaces the figures; a new hello drops them.
  v1::WorkerMessage quiet;
  quiet.mutable_heartbeat();
  ASSERT_TRUE(w.Send(quiet).ok());
  EXPECT_EQ((*view.ListWorkers())[0].devices(1).utilization_percent(), 0);
  ASSERT_TRUE(w.Send(beat).ok());
  Connect("gpu-1", 1, 2);
  EXPECT_TRUE(registry_->Find("gpu-1")->device_figures.empty());
}

TEST_F(ClusterViewTest, ADrainingWorkersCapacityCountsButIsNotFree) {
  Connect("w1", /*slots=*/2);
  Connect("w2", /*slots=*/3);
  v1::WorkerDrain drain;
  drain.set_reason("swap a disk");
  registry_->SetDrain("w2", drain);

  ClusterView view(store_.get(), registry_.get(), "test");
  absl::StatusOr<v1::ClusterStatus> status = view.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->workers_ready(), 1);
  EXPECT_EQ(status->workers_draining(), 1);
  EXPECT_EQ(status->cpu_slots_total(), 5);
  EXPECT_EQ(status->cpu_slots_free(), 2);
  absl::StatusOr<std::vector<v1::Worker>> workers = view.ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  EXPECT_FALSE((*workers)[0].has_drain());
  EXPECT_EQ((*workers)[1].state(), v1::WORKER_DRAINING);
  EXPECT_EQ((*workers)[1].drain().reason(), "swap a disk");
}

TEST_F(ClusterViewTest, TheSchedulerPlacesByReportedGpuMemory) {
  auto connect = [&](const std::string& id, int64_t memory_bytes) {
    FakeWorker& w = workers_map_[id];
    w.id = id;
    w.link = std::make_shared<FakeWorkerLink>();
    w.session = std::make_unique<WorkerSession>(
        store_.get(), registry_.get(), lifecycle_.get(), w.link,
        WorkerSessionOptions{}, nullptr);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id(id);
    *hello.mutable_hello()->add_devices() = Gpu(0, memory_bytes);
    EXPECT_TRUE(w.Send(hello).ok());
    return &w;
  };
  FakeWorker* tiny = connect("tiny", 1 << 20);  // a 1 MiB GPU fits no job
  const std::string job = Submit(/*priority=*/0, /*gpus=*/1);
  Pass();
  EXPECT_TRUE(tiny->Assignments().empty());
  EXPECT_EQ(Job(job).job.state(), v1::QUEUED);
  FakeWorker* big = connect("big", 80 * kGiB);
  Pass();
  const std::vector<v1::Assignment> a = big->Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_THAT(a[0].gpu_indices(), ElementsAre(0));
}

TEST_F(ClusterViewTest, TooManyHeartbeatDevicesIsInvalidArgument) {
  FakeWorker& w = Connect("w1", 1, 1);
  v1::WorkerMessage beat;
  for (int i = 0; i <= WorkerSessionOptions{}.max_devices; ++i) {
    beat.mutable_heartbeat()->add_devices()->set_index(i);
  }
  absl::Status s = w.Send(beat);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("heartbeat.devices: at most"));
}

}  // namespace
}  // namespace trainyard::server
