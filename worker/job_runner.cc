#include "worker/job_runner.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/replace_file.h"
#include "common/status_macros.h"
#include "worker/attempt_dirs.h"
#include "worker/gpu_selection.h"

namespace trainyard::worker {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<std::string> SpecJson(const trainyard::v1::JobSpec& spec) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  const auto status =
      google::protobuf::util::MessageToJsonString(spec, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the spec as JSON: ", status.ToString()));
  }
  return json;
}

absl::Status CheckAssignment(const trainyard::v1::Assignment& a) {
  if (!IsSafeId(a.job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id \"", a.job_id(),
                     "\" is not 1-128 characters of [A-Za-z0-9._-]"));
  }
  if (a.attempt() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attempt must be at least 1, got ", a.attempt()));
  }
  const int asked = a.spec().resources().gpus();
  const int ranks = a.spec().resources().cpu_ranks();
  if (ranks < 0 || ranks > 4096 || (asked > 0 && ranks > 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources.cpu_ranks ", ranks, " is not valid for this job"));
  }
  if (a.world_size() == 0) {
    if (asked != a.gpu_indices_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the spec asks for ", asked, " GPUs but the assignment gives ",
          a.gpu_indices_size()));
    }
    return absl::OkStatus();
  }
  // Some ranks of a job spread over several workers.
  const int all = asked > 0 ? asked : std::max(1, ranks);
  if (a.world_size() != all || a.ranks() < 1 || a.first_rank() < 0 ||
      a.first_rank() + a.ranks() > a.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks ", a.first_rank(), "+", a.ranks(), " of ",
                     a.world_size(), " do not fit a job of ", all, " ranks"));
  }
  if (asked > 0 && a.gpu_indices_size() != a.ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the assignment runs ", a.ranks(),
                     " ranks here but gives ", a.gpu_indices_size(), " GPUs"));
  }
  return absl::OkStatus();
}

// Processes of the attempt here: the assignment's share of a job spread
// over workers, else one per GPU, or resources.cpu_ranks (default 1) for a
// job on CPU slots.
int RanksOf(const trainyard::v1::Assignment& a) {
  if (a.world_size() > 0) return a.ranks();
  if (!a.gpu_indices().empty()) return a.gpu_indices_size();
  return std::max(1, a.spec().resources().cpu_ranks());
}

}  // namespace

bool IsSafeId(absl::string_view id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

JobRunner::JobRunner(JobRunnerOptions options, ReportFn report)
    : options_(std::move(options)), report_(std::move(report)) {}

JobRunner::~JobRunner() {
  StopAccepting();
  KillAll();
  WaitIdle(absl::InfiniteFuture());
}

void JobRunner::Start(const trainyard::v1::Assignment& a) {
  JoinDone();
  if (absl::Status s = CheckAssignment(a); !s.ok()) {
    Refuse(a, s.message());
    return;
  }
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    const Key key(a.job_id(), a.attempt());
    if (jobs_.contains(key)) {
      YARD_LOG(INFO) << "job " << a.job_id() << " attempt " << a.attempt()
                     << " already runs here; ignoring the repeated assignment";
      return;
    }
    Entry entry;
    entry.cpu_slots = a.gpu_indices().empty() ? RanksOf(a) : 0;
    entry.gpus.assign(a.gpu_indices().begin(), a.gpu_indices().end());
    for (const trainyard::v1::GpuGrant& g : a.gpu_grants()) {
      entry.shares[g.index()] = g;
    }
    refused = ReserveLocked(entry);
    if (refused.ok()) {
      absl::StatusOr<JobLaunch> launch = PrepareLaunch(a);
      if (launch.ok()) {
        launch->lease_deadline = lease_deadline_;
        entry.process = std::make_shared<JobProcess>(
            *std::move(launch), [this, key](trainyard::v1::JobUpdate u) {
              if (u.has_exited()) ReleaseAtExit(key);
              report_(std::move(u));
            });
        // The thread waits on mu_ before it can finish, so the entry is in
        // the map by the time it looks for it.
        entry.thread =
            std::thread(&JobRunner::RunJob, this, key, entry.process);
        jobs_.emplace(key, std::move(entry));
        return;
      }
      ReleaseLocked(entry);
      refused = launch.status();
    }
  }
  Refuse(a, refused.message());
}

absl::Status JobRunner::ReserveLocked(const Entry& entry) {
  if (!accepting_) return absl::UnavailableError("the worker is shutting down");
  if (entry.gpus.empty()) {
    const int slots = entry.cpu_slots;
    if (cpu_in_use_ + slots > options_.cpu_slots) {
      return absl::ResourceExhaustedError(
          slots == 1
              ? absl::StrCat("no free CPU slot on this worker (", cpu_in_use_,
                             " of ", options_.cpu_slots, " in use)")
              : absl::StrCat("not enough free CPU slots on this worker (",
                             slots, " asked, ", cpu_in_use_, " of ",
                             options_.cpu_slots, " in use)"));
    }
    cpu_in_use_ += slots;
    return absl::OkStatus();
  }
  std::set<int32_t> asked;
  for (int32_t gpu : entry.gpus) {
    const bool owned = std::find(options_.gpus.begin(), options_.gpus.end(),
                                 gpu) != options_.gpus.end();
    if (!owned) {
      return absl::InvalidArgumentError(
          absl::StrCat("this worker has no GPU ", gpu));
    }
    if (!asked.insert(gpu).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU ", gpu, " is listed twice"));
    }
    auto in_use = gpu_use_.find(gpu);
    const GpuUse use = in_use == gpu_use_.end() ? GpuUse{} : in_use->second;
    auto share = entry.shares.find(gpu);
    if (share == entry.shares.end()) {
      if (use.jobs > 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat("GPU ", gpu, " is already in use"));
      }
      continue;
    }
    const trainyard::v1::GpuGrant& g = share->second;
    if (g.memory_bytes() < 0 || g.compute_milli() < 1 ||
        g.compute_milli() > 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the grant on GPU ", gpu, " is not valid (", g.memory_bytes(),
          " bytes, ", g.compute_milli(), " milli-GPU)"));
    }
    auto memory = options_.gpu_memory_bytes.find(gpu);
    if (use.whole || use.compute_milli + g.compute_milli() > 1000 ||
        (memory != options_.gpu_memory_bytes.end() && memory->second > 0 &&
         use.memory_bytes + g.memory_bytes() > memory->second)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "GPU ", gpu, " cannot hold another ", g.memory_bytes(), " bytes and ",
          g.compute_milli(), " milli-GPU (", use.jobs, " job(s) hold ",
          use.whole ? std::string("it whole")
                    : absl::StrCat(use.memory_bytes, " bytes and ",
                                   use.compute_milli, " milli-GPU"),
          ")"));
    }
  }
  AccountGpusLocked(entry, +1);
  return absl::OkStatus();
}

void JobRunner::AccountGpusLocked(const Entry& entry, int sign) {
  for (int32_t gpu : entry.gpus) {
    GpuUse& use = gpu_use_[gpu];
    use.jobs += sign;
    auto share = entry.shares.find(gpu);
    if (share == entry.shares.end()) {
      use.whole = sign > 0;
    } else {
      use.memory_bytes += sign * share->second.memory_bytes();
      use.compute_milli += sign * share->second.compute_milli();
    }
    if (use.jobs <= 0) gpu_use_.erase(gpu);
  }
}

void JobRunner::ReleaseLocked(Entry& entry) {
  if (entry.released) return;
  entry.released = true;
  cpu_in_use_ -= entry.cpu_slots;
  AccountGpusLocked(entry, -1);
}

void JobRunner::ReleaseAtExit(const Key& key) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) ReleaseLocked(it->second);
}

absl::StatusOr<JobLaunch> JobRunner::PrepareLaunch(
    const trainyard::v1::Assignment& a) const {
  const fs::path job_dir = fs::path(options_.work_dir) / "jobs" / a.job_id();
  const fs::path dir = job_dir / std::to_string(a.attempt());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(std::string json, SpecJson(a.spec()));
  const fs::path spec_path = dir / "spec.json";
  RETURN_IF_ERROR(ReplaceFileDurably(spec_path.string(), json + "\n"));

  // The server sends an absolute directory on the shared checkpoint root;
  // without one the job still resumes across attempts on this worker.
  fs::path checkpoint_dir = a.checkpoint_dir().empty()
                                ? job_dir / "checkpoints"
                                : fs::path(a.checkpoint_dir());
  if (checkpoint_dir.is_relative())
    checkpoint_dir = fs::absolute(checkpoint_dir, ec);
  const auto& resources = a.spec().resources();
  const int threads = resources.has_cpu_threads() && resources.cpu_threads() > 0
                          ? resources.cpu_threads()
                          : 1;
  JobLaunch launch;
  launch.job_id = a.job_id();
  launch.attempt = a.attempt();
  launch.log_path = (dir / "log").string();
  const int ranks = RanksOf(a);
  // All the job's ranks, here or on other workers.
  const int world = a.world_size() > 0 ? a.world_size() : ranks;
  launch.first_rank = a.world_size() > 0 ? a.first_rank() : 0;
  launch.spread = a.world_size() > 0;
  // The ranks of one attempt meet through a file: in its directory when
  // they all run here, else beside its checkpoints, which every worker
  // shares. Either way a new attempt has a new file, so no rank finds an
  // old address.
  const fs::path rendezvous = a.world_size() > 0
                                  ? checkpoint_dir / "rendezvous" /
                                        absl::StrCat("attempt-", a.attempt())
                                  : dir / "rendezvous";
  fs::create_directories(rendezvous.parent_path(), ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ",
                                            rendezvous.parent_path().string(),
                                            ": ", ec.message()));
  }
  for (int i = 0; i < ranks; ++i) {
    const int rank = launch.first_rank + i;
    SpawnRequest& spawn = launch.ranks.emplace_back();
    spawn.path = options_.train_bin;
    spawn.argv = {options_.train_bin, "run", spec_path.string(), "--data-root",
                  options_.data_root, "--checkpoint-dir",
                  checkpoint_dir.string(), "--progress", "json", "--threads",
                  std::to_string(threads),
                  // Stops itself when the worker's lease runs out untold
                  // (JobProcess): stdin is where the worker tells it.
                  "--lease-fd", "0"};
    spawn.stdin_pipe = true;
    if (!a.warm_start_checkpoint().empty()) {
      spawn.argv.insert(spawn.argv.end(),
                        {"--warm-start", a.warm_start_checkpoint()});
    }
    if (world > 1) {
      spawn.argv.insert(
          spawn.argv.end(),
          {"--rank", std::to_string(rank), "--world-size",
           std::to_string(world), "--rendezvous", rendezvous.string(),
           "--ranks-on-host", std::to_string(ranks)});
      if (rank == 0 && a.world_size() > 0) {
        spawn.argv.insert(spawn.argv.end(),
                          {"--rendezvous-host", options_.rank_address});
      }
    }
    spawn.env = EnvironmentWith(RankEnvironment(a, i, rank, world));
    spawn.cwd = dir.string();
  }
  return launch;
}

std::vector<std::string> JobRunner::RankEnvironment(
    const trainyard::v1::Assignment& a, int i, int rank, int world) const {
  // Each rank sees its own GPU; a CPU job sees none, so it cannot take
  // memory from a GPU job. GPUs go by UUID: an MPS server started with a
  // CUDA_VISIBLE_DEVICES of its own renumbers the GPUs its clients see, so
  // an index could name another GPU there.
  std::vector<int32_t> gpus;
  if (!a.gpu_indices().empty()) {
    if (world > 1) {
      gpus.push_back(a.gpu_indices(i));
    } else {
      gpus.assign(a.gpu_indices().begin(), a.gpu_indices().end());
    }
  }
  std::vector<std::string> env = {
      absl::StrCat("CUDA_VISIBLE_DEVICES=",
                   CudaVisibleDevicesFor(gpus, options_.gpu_uuids)),
      absl::StrCat("YARD_JOB_ID=", a.job_id()),
      absl::StrCat("YARD_ATTEMPT=", a.attempt()),
      absl::StrCat("YARD_RANK=", rank)};
  // A job sharing its GPU gets its memory grant (the engine's arena takes
  // exactly that) and, under MPS, its compute share as a thread cap.
  for (const trainyard::v1::GpuGrant& g : a.gpu_grants()) {
    if (world > 1 && g.index() != a.gpu_indices(i)) continue;
    env.push_back(absl::StrCat("YARD_GPU_MEMORY_BYTES=", g.memory_bytes()));
    if (options_.mps) {
      env.push_back(absl::StrCat("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=",
                                 (g.compute_milli() + 9) / 10));
    }
    break;
  }
  return env;
}

void JobRunner::Refuse(const trainyard::v1::Assignment& a,
                       absl::string_view reason) {
  YARD_LOG(WARNING) << "refusing job " << a.job_id() << " attempt "
                    << a.attempt() << ": " << reason;
  trainyard::v1::JobUpdate update;
  update.set_job_id(a.job_id());
  update.set_attempt(a.attempt());
  update.mutable_exited()->set_exit_code(kRefusedExitCode);
  update.mutable_exited()->set_error(std::string(reason));
  *update.mutable_exited()->mutable_exit_time() = ToProtoTime(absl::Now());
  report_(std::move(update));
}

void JobRunner::RunJob(Key key, std::shared_ptr<JobProcess> process) {
  process->Run();  // reports the exit before returning
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  ReleaseLocked(it->second);
  done_.push_back(std::move(it->second.thread));
  jobs_.erase(it);
  // Under mu_: no attempt starts (and creates its directory) meanwhile.
  std::set<AttemptKey> active;
  for (const auto& [running, entry] : jobs_) active.insert(running);
  PruneAttemptDirs((fs::path(options_.work_dir) / "jobs").string(), active,
                   options_.keep_attempt_dirs);
}

void JobRunner::JoinDone() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(done_);
  }
  for (std::thread& t : done) t.join();
}

std::shared_ptr<JobProcess> JobRunner::Find(const std::string& job_id,
                                            int32_t attempt) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(Key(job_id, attempt));
  return it == jobs_.end() ? nullptr : it->second.process;
}

bool JobRunner::Cancel(const std::string& job_id, int32_t attempt,
                       absl::Duration grace) {
  std::shared_ptr<JobProcess> process = Find(job_id, attempt);
  if (process == nullptr) return false;
  if (grace <= absl::ZeroDuration()) grace = options_.default_cancel_grace;
  YARD_LOG(INFO) << "cancelling job " << job_id << " attempt " << attempt
                 << " (SIGKILL after " << grace << ")";
  process->Terminate(grace, JobProcess::StopFor::kCancel);
  return true;
}

bool JobRunner::Preempt(const std::string& job_id, int32_t attempt,
                        absl::Duration grace) {
  std::shared_ptr<JobProcess> process = Find(job_id, attempt);
  if (process == nullptr) return false;
  if (grace <= absl::ZeroDuration()) grace = options_.default_cancel_grace;
  YARD_LOG(INFO) << "preempting job " << job_id << " attempt " << attempt
                 << " (SIGKILL after " << grace << ")";
  process->Terminate(grace, JobProcess::StopFor::kPreempt);
  return true;
}

bool JobRunner::Stop(const std::string& job_id, int32_t attempt) {
  std::shared_ptr<JobProcess> process = Find(job_id, attempt);
  if (process == nullptr) return false;
  YARD_LOG(INFO) << "stopping stale job " << job_id << " attempt " << attempt;
  process->Kill(JobProcess::StopFor::kCancel);
  return true;
}

void JobRunner::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

void JobRunner::TerminateAll(absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : jobs_)
    entry.process->Terminate(grace, JobProcess::StopFor::kShutdown);
}

void JobRunner::KillAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : jobs_)
    entry.process->Kill(JobProcess::StopFor::kShutdown);
}

void JobRunner::RenewLeases(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  lease_deadline_ = deadline;
  for (auto& [key, entry] : jobs_) entry.process->RenewLease(deadline);
}

int JobRunner::AbandonAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : jobs_) entry.process->Abandon();
  return static_cast<int>(jobs_.size());
}

bool JobRunner::WaitIdle(absl::Time deadline) {
  bool idle;
  {
    absl::MutexLock lock(&mu_);
    auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return jobs_.empty();
    };
    idle = mu_.AwaitWithDeadline(absl::Condition(&empty), deadline);
  }
  JoinDone();
  return idle;
}

std::vector<trainyard::v1::RunningJobRef> JobRunner::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<trainyard::v1::RunningJobRef> out;
  for (const auto& [key, entry] : jobs_) {
    trainyard::v1::RunningJobRef& ref = out.emplace_back();
    ref.set_job_id(key.first);
    ref.set_attempt(key.second);
  }
  return out;
}

int JobRunner::free_cpu_slots() const {
  absl::MutexLock lock(&mu_);
  return options_.cpu_slots - cpu_in_use_;
}

}  // namespace trainyard::worker
