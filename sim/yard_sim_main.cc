// yard-sim: drives the scheduler's placement policies — the same code the
// server runs — over a cluster trace and prints what each achieves: the
// saturation experiment (saturation.h) and the timeline replay (replay.h) on
// the Alibaba openb trace.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/placement_policy.h"
#include "sim/openb_trace.h"
#include "sim/replay.h"
#include "sim/saturation.h"
#include "sim/sim_flags.h"
#include "sim/sim_report.h"

namespace trainyard::sim {
namespace {

std::string TraceFile(const SimFlags& f, const std::string& name) {
  std::filesystem::path dir(f.trace);
  if (std::filesystem::is_directory(dir / "csv")) dir /= "csv";
  return (dir / name).string();
}

// Loads a pod list; prints why on failure.
std::optional<std::vector<TracePod>> LoadPods(const SimFlags& f,
                                              const std::string& pods_file) {
  auto pods = LoadOpenbPods(TraceFile(f, pods_file));
  if (!pods.ok()) {
    std::cerr << "yard-sim: " << pods.status().message() << "\n";
    return std::nullopt;
  }
  return *std::move(pods);
}

struct Setup {
  std::vector<scheduler::WorkerCapacity> nodes;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<scheduler::PlacementPolicy>> policies;
};

// Loads the cluster and makes the policies; prints why on failure.
std::optional<Setup> LoadSetup(const SimFlags& f) {
  auto nodes = LoadOpenbNodes(TraceFile(f, f.nodes));
  if (!nodes.ok()) {
    std::cerr << "yard-sim: " << nodes.status().message() << "\n";
    return std::nullopt;
  }
  Setup s{*std::move(nodes),
          f.policies.empty() ? scheduler::PlacementPolicyNames() : f.policies,
          {}};
  for (const std::string& n : s.names) {
    auto p = scheduler::MakePlacementPolicy(n);
    if (!p.ok()) {
      std::cerr << "yard-sim: --policies: " << p.status().message() << "\n";
      return std::nullopt;
    }
    s.policies.push_back(*std::move(p));
  }
  int64_t gpus = 0;
  for (const auto& w : s.nodes) gpus += static_cast<int64_t>(w.devices.size());
  std::printf("cluster %s: %zu nodes, %lld GPUs\n", f.nodes.c_str(),
              s.nodes.size(), static_cast<long long>(gpus));
  return s;
}

int RunSaturationExperiment(const SimFlags& f) {
  std::optional<Setup> setup = LoadSetup(f);
  if (!setup) return 1;
  const std::vector<std::string>& names = setup->names;
  std::ofstream csv;
  if (!f.csv.empty()) {
    csv.open(f.csv);
    if (!csv) {
      std::cerr << "yard-sim: --csv: cannot write " << f.csv << "\n";
      return 1;
    }
    csv << "pods,policy,seed,load,unallocated_share,arrived_tasks,"
           "failed_tasks,failed_gpu_tasks\n";
  }
  for (const std::string& pods_file : f.pods) {
    std::optional<std::vector<TracePod>> pods = LoadPods(f, pods_file);
    if (!pods) return 1;
    std::map<std::string, PolicyRow> rows;
    for (const auto& policy : setup->policies) {
      PolicyRow& row = rows[std::string(policy->name())];
      row.unallocated.resize(f.loads.size());
      for (int seed = 1; seed <= f.seeds; ++seed) {
        const auto start = std::chrono::steady_clock::now();
        auto points = RunSaturation(
            setup->nodes, *pods, *policy,
            {.loads = f.loads, .seed = static_cast<uint64_t>(seed)});
        if (!points.ok()) {
          std::cerr << "yard-sim: " << policy->name() << " seed " << seed
                    << ": " << points.status().message() << "\n";
          return 1;
        }
        row.seconds.Add(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count());
        for (size_t i = 0; i < points->size(); ++i) {
          const LoadPoint& p = (*points)[i];
          row.unallocated[i].Add(100 * p.unallocated_share);
          if (csv.is_open()) {
            csv << pods_file << "," << policy->name() << "," << seed << ","
                << p.load << "," << p.unallocated_share << ","
                << p.arrived_tasks << "," << p.failed_tasks << ","
                << p.failed_gpu_tasks << "\n";
          }
        }
        row.failed.Add(static_cast<double>(points->back().failed_tasks));
      }
    }
    std::fputs(SaturationTable(f, pods_file, pods->size(), names, rows).c_str(),
               stdout);
  }
  return 0;
}

void PrintReplayRow(const std::string& name, const ReplayResult& r,
                    double seconds) {
  std::printf(
      "%-24s %9.0f %10.0f %9.0f %10.0f %8.2f %8.2f %10.1f %6lld %6lld %7.1f\n",
      name.c_str(), r.mean_wait_s, r.p99_wait_s, r.mean_jct_s, r.p99_jct_s,
      100 * r.mean_allocated_share, 100 * r.allocated_while_queued,
      r.makespan_s / 86400.0, static_cast<long long>(r.infeasible),
      static_cast<long long>(r.never_started), seconds);
}

// Every k-th node, so that about `fraction` of them (and of each model) stay.
std::vector<scheduler::WorkerCapacity> Thin(
    std::vector<scheduler::WorkerCapacity> nodes, double fraction) {
  std::vector<scheduler::WorkerCapacity> kept;
  double credit = 0;
  for (auto& n : nodes) {
    credit += fraction;
    if (credit >= 1 - 1e-9) {
      credit -= 1;
      kept.push_back(std::move(n));
    }
  }
  return kept;
}

int RunReplayExperiment(const SimFlags& f) {
  std::optional<Setup> setup = LoadSetup(f);
  if (!setup) return 1;
  setup->nodes = Thin(std::move(setup->nodes), f.cluster_fraction);
  int64_t gpus = 0;
  for (const auto& w : setup->nodes)
    gpus += static_cast<int64_t>(w.devices.size());
  std::printf("replaying on %zu nodes, %lld GPUs (--cluster-fraction %g)\n",
              setup->nodes.size(), static_cast<long long>(gpus),
              f.cluster_fraction);
  std::ofstream csv;
  if (!f.csv.empty()) {
    csv.open(f.csv);
    if (!csv) {
      std::cerr << "yard-sim: --csv: cannot write " << f.csv << "\n";
      return 1;
    }
    csv << "pods,policy,time_s,allocated_share,queued_jobs\n";
  }
  for (const std::string& pods_file : f.pods) {
    std::optional<std::vector<TracePod>> pods = LoadPods(f, pods_file);
    if (!pods) return 1;
    std::printf(
        "\n%s: timeline replay (queueing), arrivals %gx faster, "
        "times in seconds\n"
        "%-24s %9s %10s %9s %10s %8s %8s %10s %6s %6s %7s\n",
        pods_file.c_str(), f.arrival_speedup, "policy", "mean wait", "p99 wait",
        "mean JCT", "p99 JCT", "alloc %", "busy %", "makespan d", "infeas",
        "stuck", "s/run");
    for (const auto& policy : setup->policies) {
      const auto start = std::chrono::steady_clock::now();
      auto r = RunReplay(setup->nodes, *pods, *policy,
                         {.arrival_speedup = f.arrival_speedup});
      if (!r.ok()) {
        std::cerr << "yard-sim: " << policy->name() << ": "
                  << r.status().message() << "\n";
        return 1;
      }
      PrintReplayRow(std::string(policy->name()), *r,
                     std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count());
      for (const AllocationSample& s : r->samples) {
        if (csv.is_open()) {
          csv << pods_file << "," << policy->name() << "," << s.time_s << ","
              << s.allocated_share << "," << s.queued << "\n";
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace trainyard::sim

// Exit status: 0 done, 1 a run failed, 2 a bad command line (SimUsage).
int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto flags = trainyard::sim::ParseSimFlags(args);
  if (!flags.ok()) {
    // One line; the usage only when no experiment was named at all.
    std::cerr << (args.empty() ? trainyard::sim::SimUsage() : "")
              << "yard-sim: " << flags.status().message() << "\n";
    return 2;
  }
  if (flags->help) {
    std::cout << trainyard::sim::SimUsage();
    return 0;
  }
  if (flags->experiment == "replay") {
    return trainyard::sim::RunReplayExperiment(*flags);
  }
  return trainyard::sim::RunSaturationExperiment(*flags);
}
