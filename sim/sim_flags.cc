#include "sim/sim_flags.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "scheduler/placement_policy.h"

namespace trainyard::sim {
namespace {

absl::Status Bad(const std::string& flag, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
}

absl::StatusOr<std::vector<std::string>> List(const std::string& flag,
                                              const std::string& v) {
  std::vector<std::string> out = absl::StrSplit(v, ',', absl::SkipEmpty());
  if (out.empty()) return Bad(flag, "empty list");
  return out;
}

absl::StatusOr<std::vector<double>> Loads(const std::string& flag,
                                          const std::string& v) {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, List(flag, v));
  std::vector<double> out;
  for (const std::string& p : parts) {
    double d = 0;
    if (!absl::SimpleAtod(p, &d) || !(d > 0 && d <= 1) ||
        (!out.empty() && d <= out.back())) {
      return Bad(flag,
                 absl::StrCat("\"", p, "\": loads are ascending, in (0, 1]"));
    }
    out.push_back(d);
  }
  return out;
}

// Refuses the policy features `experiment` cannot act on, which would
// give the base policy's figures under another name (or, for backfill in
// saturation, figures no real queue would give).
absl::Status CheckFeatures(const std::string& experiment,
                           const std::string& policy) {
  const std::vector<std::string> parts = absl::StrSplit(policy, '+');
  const std::string& base = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string why;
    if (parts[i] == "preempt") {
      why = absl::StrCat(
          "the trace has no priorities (every pod has the same "
          "priority), so nothing can preempt and ",
          policy, " would equal ", base);
    } else if (parts[i] == "drf") {
      why = absl::StrCat(
          "the trace has no tenants (every pod is one "
          "tenant), so ",
          policy, " would equal ", base);
    } else if (parts[i] == "backfill" && experiment == "saturation") {
      why =
          "saturation has no queue (a task that does not fit fails at "
          "once), so there is nothing to backfill; use it with replay";
    }
    if (!why.empty()) {
      return Bad("--policies",
                 absl::StrCat(policy, ": +", parts[i], " is refused: ", why));
    }
  }
  return absl::OkStatus();
}

absl::Status Set(const std::string& flag, const std::string& v, SimFlags& f) {
  if (v.empty()) return Bad(flag, "empty value");
  if (flag == "--trace") {
    f.trace = v;
  } else if (flag == "--nodes") {
    f.nodes = v;
  } else if (flag == "--pods") {
    ASSIGN_OR_RETURN(f.pods, List(flag, v));
  } else if (flag == "--policies") {
    ASSIGN_OR_RETURN(f.policies, List(flag, v));
    for (size_t i = 0; i < f.policies.size(); ++i) {
      const std::string& p = f.policies[i];
      // The server's own names, combinations (fgd+backfill) included.
      if (absl::Status s = scheduler::MakePlacementPolicy(p).status();
          !s.ok()) {
        return Bad(flag,
                   std::string(absl::StripPrefix(s.message(), "policy: ")));
      }
      RETURN_IF_ERROR(CheckFeatures(f.experiment, p));
      if (std::find(f.policies.begin(), f.policies.begin() + i, p) !=
          f.policies.begin() + i) {
        return Bad(flag, absl::StrCat("\"", p, "\" is named twice"));
      }
    }
  } else if (flag == "--seeds") {
    if (!absl::SimpleAtoi(v, &f.seeds) || f.seeds < 1 || f.seeds > 1000) {
      return Bad(flag,
                 absl::StrCat("\"", v, "\" is not an integer in [1, 1000]"));
    }
  } else if (flag == "--loads") {
    ASSIGN_OR_RETURN(f.loads, Loads(flag, v));
  } else if (flag == "--arrival-speedup") {
    if (!absl::SimpleAtod(v, &f.arrival_speedup) ||
        !(f.arrival_speedup >= 1 && f.arrival_speedup <= 1e6)) {
      return Bad(flag, absl::StrCat("\"", v, "\" is not in [1, 1e6]"));
    }
  } else if (flag == "--cluster-fraction") {
    if (!absl::SimpleAtod(v, &f.cluster_fraction) ||
        !(f.cluster_fraction > 0 && f.cluster_fraction <= 1)) {
      return Bad(flag, absl::StrCat("\"", v, "\" is not in (0, 1]"));
    }
  } else if (flag == "--csv") {
    f.csv = v;
  }
  return absl::OkStatus();
}

constexpr const char* kFlags[] = {"--trace",
                                  "--nodes",
                                  "--pods",
                                  "--policies",
                                  "--seeds",
                                  "--loads",
                                  "--arrival-speedup",
                                  "--cluster-fraction",
                                  "--csv"};

}  // namespace

std::string SimUsage() {
  return "usage: yard-sim saturation|replay [--trace DIR "
         "(default ../shared/traces/alibaba-gpu-v2023)]\n"
         "         [--nodes openb_node_list_gpu_node.csv]\n"
         "         [--pods openb_pod_list_default.csv[,more.csv]]\n"
         "         [--policies first-fit,best-fit,fgd] [--seeds 10]\n"
         "         [--loads 0.8,0.9,0.95,1] [--csv FILE]\n"
         "         [--arrival-speedup 1 (replay: arrivals N times faster)]\n"
         "         [--cluster-fraction 1 (replay: keep this share of the "
         "nodes)]\n"
         "       yard-sim --help\n"
         "File names are relative to DIR (or DIR/csv when it exists).\n"
         "replay ignores --seeds and --loads; its --csv is the GPU "
         "allocation over time.\n"
         "Policies are the server's: first-fit, best-fit, fgd. Of their "
         "suffixes, +backfill\n"
         "applies to replay only (saturation has no queue); +drf and "
         "+preempt are refused\n"
         "(the trace has no tenants or priorities, so they would change "
         "nothing).\n"
         "A pod's gpu_spec (the GPU models it may run on, e.g. "
         "V100M16|V100M32) is honoured:\n"
         "it goes only to nodes of those models. Trace models become worker "
         "GPU names\n"
         "(V100M16 -> \"Tesla V100-SXM2-16GB\", T4 -> \"Tesla T4\", G2 -> "
         "\"Alibaba G2\") and each\n"
         "gpu_spec entry the name of its model, as a job's "
         "resources.gpu_models would.\n"
         "Exit status: 0 done; 1 a run failed (a trace file missing or "
         "malformed, --csv\n"
         "not writable, a policy over-committing); 2 bad command line.\n";
}

absl::StatusOr<SimFlags> ParseSimFlags(const std::vector<std::string>& args) {
  SimFlags f;
  if (args.empty()) return absl::InvalidArgumentError("missing experiment");
  const auto is_help = [](const std::string& a) {
    return a == "--help" || a == "-h";
  };
  if (args[0] == "help" || is_help(args[0])) {
    f.help = true;
    return f;
  }
  f.experiment = args[0];
  if (f.experiment != "saturation" && f.experiment != "replay") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown experiment \"", f.experiment,
                     "\" (known: saturation, replay)"));
  }
  for (size_t i = 1; i < args.size(); ++i) {
    if (is_help(args[i])) {
      f.help = true;
      return f;
    }
    std::string flag = args[i], value;
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) flag = flag.substr(0, eq);
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) ==
        std::end(kFlags)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag.rfind("--", 0) == 0 ? "unknown flag " : "unexpected argument ",
          flag));
    }
    if (eq != std::string::npos) {
      value = args[i].substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Bad(flag, "missing value");
    }
    RETURN_IF_ERROR(Set(flag, value, f));
  }
  return f;
}

}  // namespace trainyard::sim
