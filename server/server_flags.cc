#include "server/server_flags.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/job_retention.h"
#include "server/metrics_endpoint.h"

namespace trainyard::server {
namespace {

using Setter =
    std::function<absl::Status(const std::string& flag, const std::string& v,
                               YardServerOptions& o)>;

Setter String(std::string YardServerOptions::*field) {
  return [field](const std::string& flag, const std::string& v,
                 YardServerOptions& o) {
    if (v.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": empty value"));
    }
    o.*field = v;
    return absl::OkStatus();
  };
}

Setter Millis(absl::Duration YardServerOptions::*field) {
  return [field](const std::string& flag, const std::string& v,
                 YardServerOptions& o) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": expected a positive number of milliseconds, got \"", v,
          "\""));
    }
    o.*field = absl::Milliseconds(ms);
    return absl::OkStatus();
  };
}

// Zero allowed (it turns the wait off).
Setter NonNegativeMillis(absl::Duration YardServerOptions::*field) {
  return [field](const std::string& flag, const std::string& v,
                 YardServerOptions& o) {
    int32_t ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": expected a number of milliseconds >= 0, got \"", v, "\""));
    }
    o.*field = absl::Milliseconds(ms);
    return absl::OkStatus();
  };
}

Setter NonNegativeInt(int32_t YardServerOptions::*field) {
  return [field](const std::string& flag, const std::string& v,
                 YardServerOptions& o) {
    int32_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": expected a number >= 0, got \"", v, "\""));
    }
    o.*field = n;
    return absl::OkStatus();
  };
}

Setter TlsFile(std::string ServerTlsFiles::*field) {
  return [field](const std::string& flag, const std::string& v,
                 YardServerOptions& o) {
    if (v.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": empty value"));
    }
    o.tls.*field = v;
    return absl::OkStatus();
  };
}

const std::map<std::string, Setter>& Flags() {
  static const auto* flags = new std::map<std::string, Setter>{
      {"--listen", String(&YardServerOptions::listen)},
      {"--state-dir", String(&YardServerOptions::state_dir)},
      {"--data-root", String(&YardServerOptions::data_root)},
      {"--checkpoint-root", String(&YardServerOptions::checkpoint_root)},
      {"--policy", String(&YardServerOptions::policy)},
      {"--share-gpus",
       [](const std::string& flag, const std::string& v, YardServerOptions& o) {
         if (v != "mps" && v != "always") {
           return absl::InvalidArgumentError(
               absl::StrCat(flag, ": expected mps or always, got \"", v, "\""));
         }
         o.share_gpus_without_mps = v == "always";
         return absl::OkStatus();
       }},
      {"--heartbeat-interval-ms",
       Millis(&YardServerOptions::heartbeat_interval)},
      {"--worker-lease-ms", Millis(&YardServerOptions::worker_lease)},
      {"--health-listen", String(&YardServerOptions::health_listen)},
      {"--tls-cert", TlsFile(&ServerTlsFiles::cert)},
      {"--tls-key", TlsFile(&ServerTlsFiles::key)},
      {"--tls-client-ca", TlsFile(&ServerTlsFiles::client_ca)},
      {"--max-streams-per-tenant",
       NonNegativeInt(&YardServerOptions::max_streams_per_tenant)},
      {"--cancel-grace-ms",
       NonNegativeInt(&YardServerOptions::cancel_grace_ms)},
      {"--preempt-grace-ms",
       NonNegativeInt(&YardServerOptions::preempt_grace_ms)},
      {"--restart-backoff-ms",
       NonNegativeMillis(&YardServerOptions::restart_backoff)},
      {"--drain-ms", NonNegativeMillis(&YardServerOptions::drain)},
      {"--job-retention",
       [](const std::string& flag, const std::string& v, YardServerOptions& o) {
         absl::StatusOr<absl::Duration> d = ParseRetention(v);
         if (!d.ok()) {
           return absl::InvalidArgumentError(
               absl::StrCat(flag, ": ", d.status().message()));
         }
         o.job_retention = *d;
         return absl::OkStatus();
       }},
      // Empty is allowed: it turns the endpoint off.
      {"--metrics-listen",
       [](const std::string&, const std::string& v, YardServerOptions& o) {
         o.metrics_listen = v;
         return absl::OkStatus();
       }},
  };
  return *flags;
}

}  // namespace

std::string ServerUsage() {
  return "usage: yard-server --state-dir DIR [--listen 127.0.0.1:7070]\n"
         "                   [--data-root DIR (default: the current dir)]\n"
         "                   [--checkpoint-root DIR (default: STATE_DIR/"
         "checkpoints)]\n"
         "                   [--heartbeat-interval-ms 1000] "
         "[--worker-lease-ms 10000]\n"
         "                   [--policy first-fit (or best-fit, fgd; each "
         "may add +drf, +backfill, +preempt)]\n"
         "                   [--share-gpus mps (or always)]\n"
         "                   [--metrics-listen 127.0.0.1:9470 (empty: off)]\n"
         "                   [--health-listen HOST:PORT (default: none)]\n"
         "                   [--tls-cert FILE --tls-key FILE "
         "[--tls-client-ca FILE]] [--insecure-plaintext]\n"
         "                   [--max-streams-per-tenant 64] [--drain-ms 0]\n"
         "                   [--cancel-grace-ms 10000] "
         "[--preempt-grace-ms 10000]\n"
         "                   [--restart-backoff-ms 10000 (doubles per "
         "restart, at most 5 min)]\n"
         "                   [--job-retention 0 (e.g. 30d: delete jobs that "
         "ended 30 days ago)]\n"
         "                   [--job-retention-keeps-checkpoints]\n"
         "                   [--new-job-store]\n"
         "--listen HOST:0 picks a free port; the address is written to "
         "STATE_DIR/yard-server.addr.\n"
         "--share-gpus: the packing policies (best-fit, fgd) share a GPU "
         "between jobs only where\nNVIDIA MPS runs them side by side; "
         "always: also GPUs whose jobs are time-sliced.\n"
         "--metrics-listen serves Prometheus /metrics (loopback only); port "
         "0 picks a free port,\nwritten to STATE_DIR/yard-server.metrics-addr."
         "\n"
         "--health-listen serves only grpc.health.v1 (for Kubernetes probes); "
         "it may bind any\naddress. Port 0: STATE_DIR/yard-server.health-addr."
         "\n"
         "Without --tls-cert the server binds only loopback addresses "
         "(tokens would cross the\nnetwork in the clear) unless "
         "--insecure-plaintext is given. --tls-client-ca: workers\nmust "
         "present a client certificate signed by it (mTLS).\n"
         "On first start the server writes an admin token to "
         "STATE_DIR/admin.token and a worker\njoin token to "
         "STATE_DIR/worker.token (both mode 0600).\n"
         "--job-retention DURATION (d, h, m or s) deletes each ended job that "
         "long after it ended:\nits record, events, log and checkpoint "
         "directory (the directory stays with\n"
         "--job-retention-keeps-checkpoints). 0 (the default) keeps them until "
         "`yard delete`.\n"
         "--new-job-store starts with a new, empty job store although an "
         "earlier start left tokens,\nadmin.token or job directories in the "
         "checkpoint root (refused without it: the store\nwas most likely "
         "lost, or copied without its -wal file).\n";
}

absl::StatusOr<ServerCommandLine> ParseServerFlags(
    const std::vector<std::string>& args) {
  ServerCommandLine cl;
  cl.options.metrics_listen = kDefaultServerMetricsListen;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", args[i], "\" (see --help)"));
    }
    std::replace(name.begin() + 2, name.end(), '_', '-');
    if (name == "--help" || name == "-h") {
      cl.help = true;
      continue;
    }
    if (name == "--insecure-plaintext" && !has_value) {
      cl.options.insecure_plaintext = true;
      continue;
    }
    if (name == "--new-job-store" && !has_value) {
      cl.options.new_job_store = true;
      continue;
    }
    if (name == "--job-retention-keeps-checkpoints" && !has_value) {
      cl.options.job_retention_keeps_checkpoints = true;
      continue;
    }
    auto it = Flags().find(name);
    if (it == Flags().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", name, " (see --help)"));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": missing value"));
      }
      value = args[++i];
    }
    RETURN_IF_ERROR(it->second(name, value, cl.options));
  }
  if (!cl.help && cl.options.state_dir.empty()) {
    return absl::InvalidArgumentError("--state-dir: required (see --help)");
  }
  if (cl.options.job_retention_keeps_checkpoints &&
      cl.options.job_retention == absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--job-retention-keeps-checkpoints: given without --job-retention "
        "(it says what the retention deletes)");
  }
  if (!cl.help) {
    RETURN_IF_ERROR(CheckListenAddress(cl.options.listen,
                                       cl.options.tls.enabled(),
                                       cl.options.insecure_plaintext));
  }
  if (!cl.help && !cl.options.metrics_listen.empty()) {
    RETURN_IF_ERROR(
        CheckMetricsListen(cl.options.metrics_listen, "--metrics-listen"));
  }
  return cl;
}

}  // namespace trainyard::server
