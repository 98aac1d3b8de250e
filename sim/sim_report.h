// yard-sim's printed tables, kept out of main() so their layout is tested:
// the saturation table per pod list (mean +- sd over seeds per policy).
// Thread-compatible.
#ifndef TRAINYARD_SIM_SIM_REPORT_H_
#define TRAINYARD_SIM_SIM_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "sim/sim_flags.h"

namespace trainyard::sim {

// Mean and sample standard deviation of the values added.
struct Stat {
  double sum = 0, sum_sq = 0;
  int n = 0;
  void Add(double v);
  double Mean() const;
  double Sd() const;
};

struct PolicyRow {
  std::vector<Stat> unallocated;  // percent, per load of SimFlags::loads
  Stat failed;                    // at the last load
  Stat seconds;                   // per run
};

// The table for one pod list: a row per policy of `names` (in that order,
// each in `rows`), its column as wide as the longest name, then FGD's
// reduction against best-fit when both ran.
std::string SaturationTable(const SimFlags& f, const std::string& pods_file,
                            size_t pod_count,
                            const std::vector<std::string>& names,
                            const std::map<std::string, PolicyRow>& rows);

}  // namespace trainyard::sim

#endif  // TRAINYARD_SIM_SIM_REPORT_H_
