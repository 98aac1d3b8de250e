#include "sim/sim_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::sim {

void Stat::Add(double v) {
  sum += v;
  sum_sq += v * v;
  ++n;
}

double Stat::Mean() const { return n ? sum / n : 0; }

double Stat::Sd() const {
  return n > 1 ? std::sqrt(std::max(0.0, (sum_sq - sum * sum / n) / (n - 1)))
               : 0;
}

std::string SaturationTable(const SimFlags& f, const std::string& pods_file,
                            size_t pod_count,
                            const std::vector<std::string>& names,
                            const std::map<std::string, PolicyRow>& rows) {
  int width = 10;  // the base names and "policy" fit
  for (const std::string& name : names) {
    width = std::max(width, static_cast<int>(name.size()));
  }
  std::string out = absl::StrFormat(
      "\n%s (%zu pods), %d seeds: unallocated GPU share %% (mean +- sd) at "
      "arrived load\n%-*s",
      pods_file, pod_count, f.seeds, width, "policy");
  for (double l : f.loads) {
    absl::StrAppendFormat(&out, " %13s", absl::StrFormat("%g%%", l * 100));
  }
  absl::StrAppendFormat(&out, " %16s %9s\n", "failed tasks", "s/run");
  for (const std::string& name : names) {
    const PolicyRow& r = rows.at(name);
    absl::StrAppendFormat(&out, "%-*s", width, name);
    for (const Stat& s : r.unallocated) {
      absl::StrAppendFormat(&out, " %13s",
                            absl::StrFormat("%.2f+-%.2f", s.Mean(), s.Sd()));
    }
    absl::StrAppendFormat(
        &out, " %16s %9.2f\n",
        absl::StrFormat("%.0f+-%.0f", r.failed.Mean(), r.failed.Sd()),
        r.seconds.Mean());
  }
  if (rows.contains("fgd") && rows.contains("best-fit")) {
    const double bf = rows.at("best-fit").unallocated.back().Mean();
    const double fgd = rows.at("fgd").unallocated.back().Mean();
    if (bf > 0) {
      absl::StrAppendFormat(
          &out, "fgd vs best-fit at %g%% load: %.1f%% less unallocated\n",
          f.loads.back() * 100, 100 * (bf - fgd) / bf);
    }
  }
  return out;
}

}  // namespace trainyard::sim
