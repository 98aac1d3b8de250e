// yard-sim's command line: which experiment, on which trace files, with
// which policies and seeds. Parsing is separate from main() so bad input is
// tested: every error names the flag or value at fault.
#ifndef TRAINYARD_SIM_SIM_FLAGS_H_
#define TRAINYARD_SIM_SIM_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard::sim {

struct SimFlags {
  bool help = false;       // --help, -h or help asked for the usage
  std::string experiment;  // "saturation" or "replay"
  // A trace folder (its csv/ subfolder is used when present).
  std::string trace = "../shared/traces/alibaba-gpu-v2023";
  std::string nodes = "openb_node_list_gpu_node.csv";
  std::vector<std::string> pods = {"openb_pod_list_default.csv"};
  std::vector<std::string> policies;  // empty: every known policy
  int32_t seeds = 10;
  std::vector<double> loads = {0.8, 0.9, 0.95, 1.0};
  double arrival_speedup = 1;  // replay: arrival times divided by this
  // Replay: keep this share of the nodes (every k-th), to load the cluster.
  double cluster_fraction = 1;
  std::string csv;  // also write one row per (pods, policy, seed, load)
};

std::string SimUsage();

// `args` excludes argv[0]. INVALID_ARGUMENT names the bad flag or value.
// "--help" or "-h" where a flag may stand, or "help" as the experiment,
// sets `help`; as the value of a flag ("--csv help") it is a value.
absl::StatusOr<SimFlags> ParseSimFlags(const std::vector<std::string>& args);

}  // namespace trainyard::sim

#endif  // TRAINYARD_SIM_SIM_FLAGS_H_
