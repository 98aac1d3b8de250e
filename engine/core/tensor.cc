// Shape helpers. See tensor.h.
#include "engine/core/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard::engine {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace trainyard::engine
