#include "server/yard_server.h"

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_credentials.h"
#include "common/log.h"
#include "common/replace_file.h"
#include "common/status_macros.h"
#include "scheduler/placement_policy.h"
#include "server/admin_service.h"
#include "server/auth_store.h"
#include "server/authenticator.h"
#include "server/change_notifier.h"
#include "server/checkpoint_paths.h"
#include "server/cluster_service.h"
#include "server/cluster_view.h"
#include "server/health_endpoint.h"
#include "server/job_lifecycle.h"
#include "server/job_retention.h"
#include "server/job_service.h"
#include "server/job_store.h"
#include "server/job_watch.h"
#include "server/live_streams.h"
#include "server/metrics_endpoint.h"
#include "server/queue_positions.h"
#include "server/scheduler_loop.h"
#include "server/server_metrics.h"
#include "server/tenant_limits.h"
#include "server/unparsed_requests.h"
#include "server/worker_drains.h"
#include "server/worker_registry.h"
#include "server/worker_service.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> SplitHostPort(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  HostPort hp;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &hp.port) || hp.port < 0 ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen, ": expected HOST:PORT, e.g. 127.0.0.1:7070"));
  }
  hp.host = listen.substr(0, colon);
  return hp;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "[::1]" ||
         absl::StartsWith(host, "127.");
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Takes the lock file at `path` for this process, writing `owner` into it;
// `refusal` (with what the holder wrote) when another process holds it.
absl::StatusOr<int> LockFile(const std::string& path, const std::string& owner,
                             const std::string& refusal) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string holder(256, '\0');
    const ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
    ::close(fd);
    holder = Trimmed(holder);
    return absl::FailedPreconditionError(
        holder.empty() ? refusal
                       : absl::StrCat(refusal, " (its lock file ", path,
                                      " says: ", holder, ")"));
  }
  const std::string line = owner + "\n";
  if (::ftruncate(fd, 0) != 0 || ::write(fd, line.data(), line.size()) !=
                                     static_cast<ssize_t>(line.size())) {
    YARD_LOG(WARNING) << "cannot record the owner in " << path;
  }
  return fd;
}

// One server per state dir: a second one would fight over the jobs.
absl::StatusOr<int> LockStateDir(const std::string& state_dir) {
  return LockFile(
      state_dir + "/yard-server.lock", absl::StrCat(::getpid()),
      absl::StrCat("another yard-server is using the state dir ", state_dir));
}

// One server per checkpoint root too: two would number their jobs
// independently and write (and resume from) each other's directories.
absl::StatusOr<int> LockCheckpointRoot(const std::string& root,
                                       const std::string& state_dir) {
  return LockFile(
      root + "/.yard-server.lock",
      absl::StrCat("pid ", ::getpid(), ", state dir ", state_dir),
      absl::StrCat("another yard-server is using the checkpoint root ", root,
                   ": two servers would give their jobs the same ids, and "
                   "so the same checkpoint directories; give each server "
                   "its own --checkpoint-root"));
}

std::string Absolute(const std::string& path) {
  return fs::absolute(path).lexically_normal().string();
}

}  // namespace

absl::Status CheckServerOptions(const YardServerOptions& o) {
  RETURN_IF_ERROR(
      CheckListenAddress(o.listen, o.tls.enabled(), o.insecure_plaintext));
  if (o.max_streams_per_tenant < 0) {
    return absl::InvalidArgumentError(
        "--max-streams-per-tenant: must be >= 0 (0 = unlimited)");
  }
  if (o.drain < absl::ZeroDuration() || o.drain > absl::Minutes(10)) {
    return absl::InvalidArgumentError("--drain-ms: must be in [0, 600000]");
  }
  if (!o.metrics_listen.empty()) {
    RETURN_IF_ERROR(CheckMetricsListen(o.metrics_listen, "--metrics-listen"));
  }
  if (o.state_dir.empty()) {
    return absl::InvalidArgumentError("--state-dir: required");
  }
  if (o.heartbeat_interval <= absl::ZeroDuration() ||
      o.heartbeat_interval > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        "--heartbeat-interval-ms: must be in [1, 3600000]");
  }
  if (o.worker_lease <= o.heartbeat_interval ||
      o.worker_lease > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        "--worker-lease-ms: must be greater than --heartbeat-interval-ms "
        "and at most 86400000");
  }
  RETURN_IF_ERROR(scheduler::MakePlacementPolicy(o.policy).status());
  if (!o.health_listen.empty())
    RETURN_IF_ERROR(CheckHealthListen(o.health_listen));
  // Reads and checks the certificate and key files (and their pairing).
  RETURN_IF_ERROR(MakeServerCredentials(o.tls).status());
  return absl::OkStatus();
}

absl::Status CheckListenAddress(const std::string& listen, bool tls,
                                bool insecure_plaintext) {
  ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(listen));
  if (!IsLoopbackHost(hp.host) && !tls && !insecure_plaintext) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen, ": a non-loopback address needs TLS "
        "(--tls-cert and --tls-key) so that tokens do not cross the network "
        "in the clear; --insecure-plaintext overrides this"));
  }
  return absl::OkStatus();
}

struct YardServer::Parts {
  YardServerOptions options;
  bool wildcard_listen = false;  // --listen binds every address
  std::string address;
  std::string address_file;
  int lock_fd = -1;             // the state dir's lock
  int checkpoint_lock_fd = -1;  // the checkpoint root's
  ChangeNotifier notifier;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<AuthStore> auth_store;
  std::unique_ptr<Authenticator> authenticator;
  std::unique_ptr<TenantGate> tenant_gate;
  std::unique_ptr<AdminServiceImpl> admin_service;
  std::unique_ptr<WorkerRegistry> workers;
  std::unique_ptr<WorkerDrains> drains;
  std::unique_ptr<JobLifecycle> lifecycle;
  std::unique_ptr<scheduler::PlacementPolicy> policy;
  QueuePositions queue_positions;  // the loop writes, JobService reads
  std::unique_ptr<SchedulerLoop> loop;
  std::unique_ptr<JobRetention> retention;  // null: jobs kept forever
  std::unique_ptr<ClusterView> view;
  std::unique_ptr<JobWatcher> watcher;
  std::unique_ptr<LiveStreams> streams;  // WatchJob and GetJobLogs
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<ClusterServiceImpl> cluster_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::shared_ptr<ServerMetrics> metrics;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint;  // null: metrics off
  std::unique_ptr<HealthEndpoint> health_endpoint;    // null: none
  bool shut_down = false;

  ~Parts() {
    if (lock_fd >= 0) ::close(lock_fd);
    if (checkpoint_lock_fd >= 0) ::close(checkpoint_lock_fd);
  }

  absl::Status PrepareStateDir();  // directories, the lock, swept deletions
  absl::Status OpenState();        // both stores, checked before written
  // A new job store beside state an old one left: refused (see Start).
  absl::Status CheckNewJobStore(int64_t tokens, const JobStoreFound& found);
  // New job ids start after the job directories in the checkpoint root.
  absl::Status NumberPastCheckpointDirs();
  absl::Status OpenAuth();  // auth.db; first start: the admin/worker tokens
  absl::Status Recover();
  void BuildLogic();
  absl::Status Serve();
  absl::Status ServeSidePorts();  // /metrics and the health-only port
  void MarkServing();             // both ports say SERVING
};

absl::Status YardServer::Parts::PrepareStateDir() {
  YardServerOptions& o = options;
  std::error_code ec;
  fs::create_directories(o.state_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the state dir ", o.state_dir, ": ", ec.message()));
  }
  o.state_dir = Absolute(o.state_dir);
  o.data_root = Absolute(o.data_root);
  o.checkpoint_root = Absolute(o.checkpoint_root.empty()
                                   ? o.state_dir + "/checkpoints"
                                   : o.checkpoint_root);
  fs::create_directories(o.checkpoint_root, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the checkpoint root ", o.checkpoint_root, ": ",
        ec.message()));
  }
  ASSIGN_OR_RETURN(lock_fd, LockStateDir(o.state_dir));
  ASSIGN_OR_RETURN(checkpoint_lock_fd,
                   LockCheckpointRoot(o.checkpoint_root, o.state_dir));
  if (const int swept = SweepDeletedCheckpoints(o.checkpoint_root)) {
    YARD_LOG(INFO) << "removed " << swept
                   << " checkpoint directories left by interrupted deletions";
  }
  return absl::OkStatus();
}

// Nothing is written to either store before every check that can refuse
// the start has passed: auth.db is read first (a file that is not one
// stops the start), the job store runs its own checks, then
// CheckNewJobStore; only then is the job store created or upgraded, and
// auth.db after it.
absl::Status YardServer::Parts::OpenState() {
  const YardServerOptions& o = options;
  ASSIGN_OR_RETURN(int64_t tokens,
                   AuthStore::CountTokens(o.state_dir + "/auth.db"));
  JobStoreOptions so;
  so.commit_fault = o.store_commit_fault;
  so.path = o.state_dir + "/trainyard.db";
  so.checkpoint_root = o.checkpoint_root;
  so.before_write = [this, tokens](const JobStoreFound& found) {
    return CheckNewJobStore(tokens, found);
  };
  so.trainer_events_kept = o.trainer_events_kept;
  so.log_bytes_kept = o.log_bytes_kept;
  so.clock = o.clock;
  so.on_commit = [this](const std::vector<std::string>& job_ids) {
    notifier.Notify(job_ids);
  };
  so.on_state_change = [m = metrics.get()](const v1::StateChange& c) {
    m->OnStateChange(c);
  };
  so.on_commit_failure = [m = metrics.get()](const absl::Status&) {
    m->OnStoreWriteFailure();
  };
  ASSIGN_OR_RETURN(store, JobStore::Open(std::move(so)));
  RETURN_IF_ERROR(OpenAuth());
  return NumberPastCheckpointDirs();
}

absl::Status YardServer::Parts::CheckNewJobStore(int64_t tokens,
                                                 const JobStoreFound& found) {
  const YardServerOptions& o = options;
  if (!found.is_new || o.new_job_store) return absl::OkStatus();
  ASSIGN_OR_RETURN(JobDirs dirs, FindJobDirs(o.checkpoint_root));
  // Written at the first start, after the job store was made (a copy of
  // auth.db without its -wal holds no tokens either).
  std::error_code ec;
  const bool token_file = fs::exists(o.state_dir + "/admin.token", ec);
  if (tokens == 0 && dirs.count == 0 && !token_file) {
    return absl::OkStatus();  // a first start
  }
  std::vector<std::string> left;
  if (tokens > 0) {
    left.push_back(absl::StrCat(o.state_dir, "/auth.db holds ", tokens,
                                tokens == 1 ? " token" : " tokens"));
  }
  if (token_file) {
    left.push_back(
        absl::StrCat(o.state_dir, "/admin.token is there from a first start"));
  }
  if (dirs.count > 0) {
    left.push_back(absl::StrCat(
        "the checkpoint root ", o.checkpoint_root, " holds ", dirs.count,
        dirs.count == 1 ? " job directory" : " job directories", " (up to ",
        JobIdForNumber(dirs.highest), ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      o.state_dir,
      "/trainyard.db is not a job store yet (it is missing, empty, or a copy "
      "made without its trainyard.db-wal file), but this is not a first "
      "start: ",
      absl::StrJoin(left, ", "),
      ". Starting on it would forget every earlier job and number new jobs "
      "from j-000001 again. Restore the whole state dir together (trainyard.db "
      "with its "
      "-wal file, copied while the server was stopped, or a copy made with "
      "sqlite3's .backup); or, to start with no jobs on purpose, pass "
      "--new-job-store (new job ids then start after the directories in "
      "the checkpoint root)."));
}

absl::Status YardServer::Parts::NumberPastCheckpointDirs() {
  const std::string& root = options.checkpoint_root;
  ASSIGN_OR_RETURN(JobDirs dirs, FindJobDirs(root));
  if (dirs.highest == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(int64_t skipped, store->SkipJobNumbersThrough(dirs.highest));
  if (skipped > 0) {
    YARD_LOG(WARNING) << "the checkpoint root " << root
                      << " holds directories of jobs up to "
                      << JobIdForNumber(dirs.highest)
                      << " that the job store has not numbered yet (the "
                         "store is older than the checkpoints, or new): new "
                         "jobs start at "
                      << JobIdForNumber(dirs.highest + 1)
                      << ", so that none takes over their checkpoints";
  }
  return absl::OkStatus();
}

absl::Status YardServer::Parts::OpenAuth() {
  const YardServerOptions& o = options;
  ASSIGN_OR_RETURN(auth_store,
                   AuthStore::Open(o.state_dir + "/auth.db", o.clock));
  authenticator = std::make_unique<Authenticator>(auth_store.get(),
                                                  !o.tls.client_ca.empty());
  tenant_gate = std::make_unique<TenantGate>(auth_store.get(), store.get(),
                                             o.max_streams_per_tenant);
  if (!auth_store->Empty()) return absl::OkStatus();
  // First start: an admin token to create the others with, and a join
  // token for workers on this machine. The admin token is printed once.
  ASSIGN_OR_RETURN(CreatedToken admin,
                   auth_store->CreateToken("admin", v1::ADMIN,
                                           "created on first start"));
  ASSIGN_OR_RETURN(CreatedToken worker,
                   auth_store->CreateToken("workers", v1::WORKER,
                                           "created on first start"));
  const std::string admin_file = o.state_dir + "/admin.token";
  RETURN_IF_ERROR(ReplaceFileDurably(admin_file, admin.token + "\n", 0600));
  RETURN_IF_ERROR(ReplaceFileDurably(o.state_dir + "/worker.token",
                                     worker.token + "\n", 0600));
  std::fprintf(stderr,
               "yard-server: first start; admin token (shown once, also in "
               "%s):\n  %s\n",
               admin_file.c_str(), admin.token.c_str());
  return absl::OkStatus();
}

// Known workers, and jobs holding a worker, stay as they are; each worker
// gets a lease from now to come back (and re-attach its jobs), or it is
// declared lost and its jobs return to the queue.
absl::Status YardServer::Parts::Recover() {
  ASSIGN_OR_RETURN(std::vector<JobStore::KnownWorker> known,
                   store->ListKnownWorkers());
  // The previous server heard no worker after its last mark.
  ASSIGN_OR_RETURN(std::optional<absl::Time> alive, store->LastAlive());
  for (JobStore::KnownWorker& w : known) {
    const std::string id = w.hello.worker_id();
    workers->AddRecovered(id, std::move(w.hello), w.lost,
                          alive.value_or(absl::InfinitePast()));
  }
  if (!known.empty()) {
    YARD_LOG(INFO) << known.size() << " known workers have "
                   << absl::FormatDuration(workers->lease())
                   << " to come back before they are declared lost";
  }
  RETURN_IF_ERROR(drains->Load());
  ASSIGN_OR_RETURN(int held, lifecycle->RecoverHeldJobs());
  ASSIGN_OR_RETURN(auto counts, store->CountJobsByState());
  int64_t total = 0;
  for (const auto& [state, n] : counts) total += n;
  YARD_LOG(INFO) << "recovered " << total << " jobs: " << counts[v1::QUEUED]
                 << " queued, " << held << " on workers awaiting re-attach";
  return absl::OkStatus();
}

void YardServer::Parts::BuildLogic() {
  const YardServerOptions& o = options;
  workers = std::make_unique<WorkerRegistry>(o.clock, o.worker_lease);
  JobLifecycleOptions lo;
  lo.checkpoint_root = o.checkpoint_root;
  lo.validation.data_root = o.data_root;
  lo.cancel_grace_ms = o.cancel_grace_ms;
  lo.preempt_grace_ms = o.preempt_grace_ms;
  lo.restart_backoff = o.restart_backoff;
  lifecycle = std::make_unique<JobLifecycle>(store.get(), workers.get(),
                                             o.clock, lo);
  SchedulerLoopOptions sched;
  sched.tick = o.scheduler_tick;
  sched.share_gpus_without_mps = o.share_gpus_without_mps;
  sched.queue_positions = &queue_positions;
  sched.tenant_limits = [auth = auth_store.get()](const std::string& t) {
    return auth->GetTenant(t);
  };
  sched.on_pass_done = [m = metrics.get()](absl::Duration d) {
    m->ObserveSchedulingPass(d);
  };
  sched.on_time_limit_stop = [m = metrics.get()] { m->OnTimeLimitStop(); };
  loop = std::make_unique<SchedulerLoop>(store.get(), workers.get(),
                                         lifecycle.get(), policy.get(),
                                         o.clock, sched);
  lifecycle->set_scheduler_wake([this] { loop->Wake(); });
  lifecycle->set_on_halving_stop([m = metrics.get()] { m->OnHalvingStop(); });
  drains = std::make_unique<WorkerDrains>(store.get(), workers.get(), o.clock,
                                          [this] { loop->Wake(); });
  view = std::make_unique<ClusterView>(store.get(), workers.get(),
                                       kServerVersion);
  watcher = std::make_unique<JobWatcher>(store.get());
  streams = std::make_unique<LiveStreams>(&notifier);
  job_service = std::make_unique<JobServiceImpl>(
      lifecycle.get(), store.get(), watcher.get(), streams.get(),
      authenticator.get(), tenant_gate.get());
  admin_service = std::make_unique<AdminServiceImpl>(auth_store.get(),
                                                     authenticator.get());
  job_service->set_queue_positions(&queue_positions);
  job_service->set_on_submit_rejected(
      [m = metrics.get()](const absl::Status& s) { m->OnSubmitRejected(s); });
  job_service->set_on_job_deleted([m = metrics.get()](const DeletedJob& d) {
    m->OnJobDeleted(ServerMetrics::DeletedBy::kRequest, d.checkpoint_bytes);
  });
  job_service->set_job_retention(o.job_retention);
  if (o.job_retention > absl::ZeroDuration()) {
    JobRetentionOptions ro;
    ro.keep_for = o.job_retention;
    ro.keep_checkpoints = o.job_retention_keeps_checkpoints;
    ro.on_deleted = [m = metrics.get()](const DeletedJob& d) {
      m->OnJobDeleted(ServerMetrics::DeletedBy::kRetention, d.checkpoint_bytes);
    };
    retention = std::make_unique<JobRetention>(store.get(), lifecycle.get(),
                                               o.clock, std::move(ro));
  }
  metrics->Watch(store.get(), workers.get());
  cluster_service = std::make_unique<ClusterServiceImpl>(
      view.get(), store.get(), drains.get(), authenticator.get());
  WorkerSessionOptions wo;
  wo.heartbeat_interval = o.heartbeat_interval;
  worker_service = std::make_unique<WorkerServiceImpl>(
      store.get(), workers.get(), lifecycle.get(), wo,
      [this] { loop->Wake(); });
  worker_service->set_authenticator(authenticator.get());
}

absl::Status YardServer::Parts::Serve() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(options.tls));
  builder.AddListeningPort(options.listen, credentials, &port);
  // gRPC sets SO_REUSEPORT by default: a second server on the same port
  // would then start too and take half of the connections. One owner.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Workers and watchers may keep idle streams alive with pings.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  // The sync server runs each call on a pool thread. With gRPC's default
  // of at most 2 idle pollers it ends a thread after nearly every call and
  // starts another for the next, which under load costs more than the calls
  // themselves; keeping up to 64 idle threads around avoids that churn.
  using SyncOption = grpc::ServerBuilder::SyncServerOption;
  builder.SetSyncServerOption(SyncOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(SyncOption::MAX_POLLERS, 64);
  builder.RegisterService(job_service.get());
  builder.RegisterService(cluster_service.get());
  builder.RegisterService(worker_service.get());
  builder.RegisterService(admin_service.get());
  builder.experimental().SetInterceptorCreators(UnparsedRequestsInterceptors());
  grpc_server = builder.BuildAndStart();
  if (grpc_server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.listen, " (address in use?)"));
  }
  ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(options.listen));
  // A wildcard bind is reached through loopback from this machine.
  wildcard_listen = hp.host == "0.0.0.0" || hp.host == "[::]";
  address = absl::StrCat(
      hp.host == "[::1]" || !(wildcard_listen || IsLoopbackHost(hp.host))
          ? hp.host
          : "127.0.0.1",
      ":", port);
  address_file = options.state_dir + "/yard-server.addr";
  return ReplaceFileDurably(address_file, address + "\n");
}

absl::Status YardServer::Parts::ServeSidePorts() {
  if (!options.metrics_listen.empty()) {
    MetricsEndpointOptions mo;
    mo.listen = options.metrics_listen;
    mo.address_file = options.state_dir + "/yard-server.metrics-addr";
    ASSIGN_OR_RETURN(metrics_endpoint, MetricsEndpoint::Start(mo, metrics));
    YARD_LOG(INFO) << "metrics on http://" << metrics_endpoint->address()
                   << "/metrics";
  }
  if (!options.health_listen.empty()) {
    ASSIGN_OR_RETURN(
        health_endpoint,
        HealthEndpoint::Start(options.health_listen,
                              options.state_dir + "/yard-server.health-addr"));
    YARD_LOG(INFO) << "gRPC health on " << health_endpoint->address();
  }
  return absl::OkStatus();
}

void YardServer::Parts::MarkServing() {
  MarkServicesServing(*grpc_server);
  if (health_endpoint) health_endpoint->SetServing();
}

absl::StatusOr<std::unique_ptr<YardServer>> YardServer::Start(
    YardServerOptions options) {
  RETURN_IF_ERROR(CheckServerOptions(options));
  auto parts = std::make_unique<Parts>();
  parts->options = std::move(options);
  ASSIGN_OR_RETURN(parts->policy,
                   scheduler::MakePlacementPolicy(parts->options.policy));
  RETURN_IF_ERROR(parts->PrepareStateDir());
  parts->metrics =
      std::make_shared<ServerMetrics>(parts->options.clock, kServerVersion);
  // The side ports first: one in use stops the start before the store is
  // opened (or created) and before workers can reach the API port.
  RETURN_IF_ERROR(parts->ServeSidePorts());
  RETURN_IF_ERROR(parts->OpenState());
  parts->BuildLogic();
  RETURN_IF_ERROR(parts->Recover());
  std::unique_ptr<YardServer> server(new YardServer(std::move(parts)));
  RETURN_IF_ERROR(server->parts_->Serve());
  server->parts_->MarkServing();
  server->parts_->loop->Start();
  if (server->parts_->retention) server->parts_->retention->Start();
  // A wildcard bind is reached locally through loopback: say both.
  const std::string& listen = server->parts_->options.listen;
  const std::string& address = server->address();
  YARD_LOG(INFO) << "yard-server " << kServerVersion << " serving on "
                 << (server->parts_->wildcard_listen
                         ? absl::StrCat(listen.substr(0, listen.rfind(':')),
                                        address.substr(address.rfind(':')),
                                        ", locally ", address)
                         : address)
                 << " (state dir " << server->parts_->options.state_dir
                 << ", policy " << server->parts_->policy->name() << ")";
  return server;
}

YardServer::YardServer(std::unique_ptr<Parts> parts)
    : parts_(std::move(parts)) {}

YardServer::~YardServer() { Shutdown(); }

const std::string& YardServer::address() const { return parts_->address; }

std::string YardServer::admin_token_file() const {
  return parts_->options.state_dir + "/admin.token";
}

std::string YardServer::worker_token_file() const {
  return parts_->options.state_dir + "/worker.token";
}

const std::string& YardServer::metrics_address() const {
  static const std::string kNone;
  return parts_->metrics_endpoint ? parts_->metrics_endpoint->address() : kNone;
}

void YardServer::Shutdown() {
  Parts& p = *parts_;
  if (p.shut_down) return;
  p.shut_down = true;
  if (!p.address_file.empty()) {
    std::error_code ec;
    fs::remove(p.address_file, ec);
  }
  if (p.grpc_server && p.grpc_server->GetHealthCheckService() != nullptr) {
    p.grpc_server->GetHealthCheckService()->Shutdown();
  }
  // Probes see NOT_SERVING on both ports for the drain, then the ports close.
  if (p.health_endpoint) p.health_endpoint->SetNotServing();
  if (p.options.drain > absl::ZeroDuration()) {
    // Wall time: the drain is for probes and load balancers out there.
    YARD_LOG(INFO) << "draining for " << absl::FormatDuration(p.options.drain);
    absl::SleepFor(p.options.drain);
  }
  if (p.health_endpoint) p.health_endpoint->Shutdown();
  p.metrics_endpoint.reset();  // scrapes read the store: stop them first
  if (p.streams) p.streams->Shutdown();  // watch and log streams end
  if (p.retention) p.retention->Stop();
  if (p.loop) p.loop->Stop();
  if (p.workers) {
    p.workers->CloseAll(absl::UnavailableError("the server is shutting down"));
  }
  if (p.grpc_server) {
    p.grpc_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
    p.grpc_server->Wait();
  }
  // The worker streams have ended; what their last messages started ends
  // before the store closes.
  if (p.worker_service) p.worker_service->Shutdown();
  if (p.job_service) p.job_service->Shutdown();
  p.store.reset();
  YARD_LOG(INFO) << "yard-server stopped";
}

}  // namespace trainyard::server
