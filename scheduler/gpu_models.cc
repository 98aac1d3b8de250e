#include "scheduler/gpu_models.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainyard::scheduler {

bool GpuModelMatches(absl::string_view model, absl::string_view gpu_name) {
  if (model.empty() || model.size() > gpu_name.size()) return false;
  const auto same = [](char a, char b) {
    return absl::ascii_tolower(static_cast<unsigned char>(a)) ==
           absl::ascii_tolower(static_cast<unsigned char>(b));
  };
  return std::search(gpu_name.begin(), gpu_name.end(), model.begin(),
                     model.end(), same) != gpu_name.end();
}

bool AllowsGpu(const std::vector<std::string>& models,
               absl::string_view gpu_name) {
  if (models.empty()) return true;
  return std::any_of(models.begin(), models.end(), [&](const std::string& m) {
    return GpuModelMatches(m, gpu_name);
  });
}

std::string DescribeGpuModels(const std::vector<std::string>& models) {
  std::string out;
  for (size_t i = 0; i < models.size(); ++i) {
    const char* sep = i == 0 ? "" : (i + 1 == models.size() ? " or " : ", ");
    absl::StrAppend(&out, sep, "\"", models[i], "\"");
  }
  return out;
}

}  // namespace trainyard::scheduler
