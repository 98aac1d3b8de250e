#include "client/sweep.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "spec/limits.h"
#include "spec/spec_override.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--sweep ", text, ": ", why));
}

}  // namespace

absl::StatusOr<SweepAxis> ParseSweepAxis(absl::string_view text) {
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return Bad(text, "expected FIELD=VALUE,VALUE,...");
  }
  SweepAxis axis;
  axis.field = std::string(text.substr(0, eq));
  if (axis.field.empty()) return Bad(text, "no field before '='");
  const absl::string_view list = text.substr(eq + 1);
  if (list.empty()) return Bad(text, "no values after '='");

  // Split at the commas outside brackets.
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == '[') {
      if (depth > 0) return Bad(text, "a '[' inside brackets");
      ++depth;
    } else if (c == ']') {
      if (depth == 0) return Bad(text, "a ']' without its '['");
      --depth;
    } else if (c == ',' && depth == 0) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return Bad(text, "a '[' without its ']'");
  items.push_back(list.substr(start));

  std::set<absl::string_view> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    const absl::string_view item = items[i];
    if (item.empty()) {
      return Bad(text, absl::StrCat("value ", i + 1, " is empty"));
    }
    if (!seen.insert(item).second) {
      return Bad(text, absl::StrCat("the value ", item, " is given twice"));
    }
    const bool bracketed = item.front() == '[';
    if (bracketed && item.back() != ']') {
      return Bad(text,
                 absl::StrCat("the list ", item, " has text after its ']'"));
    }
    if (!bracketed && item.find_first_of("[]") != absl::string_view::npos) {
      return Bad(text,
                 absl::StrCat("the value ", item, " has a bracket inside it"));
    }
    axis.values.emplace_back(bracketed ? item.substr(1, item.size() - 2)
                                       : item);
    axis.shown.emplace_back(item);
  }
  return axis;
}

absl::StatusOr<std::vector<SweepPoint>> ExpandSweep(
    const std::vector<SweepAxis>& axes) {
  std::set<std::string> fields;
  double count = 1;  // a double: many axes could overflow an integer
  for (const SweepAxis& axis : axes) {
    if (!fields.insert(axis.field).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sweep: ", axis.field,
                       " is swept twice; give all its values in one --sweep"));
    }
    count *= static_cast<double>(axis.values.size());
  }
  if (count > kMaxSweepJobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sweep: ",
        count < 1e15 ? absl::StrCat(static_cast<int64_t>(count))
                     : std::string("more than 10^15"),
        " combinations; a sweep makes at most ", kMaxSweepJobs, " jobs"));
  }
  std::vector<SweepPoint> points(static_cast<size_t>(count));
  // Point p takes value (p / stride) % n of each axis; the last axis has
  // stride 1, so the first varies slowest.
  size_t stride = points.size();
  for (const SweepAxis& axis : axes) {
    stride /= axis.values.size();
    for (size_t p = 0; p < points.size(); ++p) {
      const size_t v = (p / stride) % axis.values.size();
      points[p].assignments.push_back(
          absl::StrCat(axis.field, "=", axis.values[v]));
      points[p].values.push_back(axis.shown[v]);
      if (!points[p].label.empty()) points[p].label += " ";
      absl::StrAppend(&points[p].label, axis.field, "=", axis.shown[v]);
    }
  }
  return points;
}

absl::StatusOr<std::vector<v1::JobSpec>> SweepSpecs(
    const v1::JobSpec& base, const std::vector<SweepPoint>& points) {
  std::vector<v1::JobSpec> specs;
  specs.reserve(points.size());
  for (const SweepPoint& point : points) {
    v1::JobSpec spec = base;
    for (const std::string& assignment : point.assignments) {
      if (absl::Status s = spec::ApplySpecOverride(assignment, spec); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--sweep ", s.message()));
      }
    }
    std::string name = base.name();
    if (!point.label.empty()) {
      name = name.empty() ? point.label : absl::StrCat(name, " ", point.label);
    }
    if (static_cast<int64_t>(name.size()) > spec::kMaxNameLength) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sweep: the job name \"", name, "\" would be ",
                       name.size(), " bytes, at most ", spec::kMaxNameLength,
                       " are allowed; shorten the spec's name"));
    }
    spec.set_name(std::move(name));
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string SweepRequestId(const std::string& base, size_t index) {
  return absl::StrCat(base, "-", index + 1);
}

}  // namespace trainyard::client
