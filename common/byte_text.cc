#include "common/byte_text.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard {

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(std::max<int64_t>(bytes, 0), " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  constexpr size_t kLast = sizeof(kUnits) / sizeof(kUnits[0]) - 1;
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // 1023.96 KiB would print as "1024.0 KiB": move up as soon as the rounded
  // value reaches the next unit.
  while (unit < kLast && value >= 1023.95) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace trainyard
