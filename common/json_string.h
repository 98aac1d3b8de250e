// JSON string literals: the one escaper every hand-written JSON writer in the
// project shares (spec conversion, checkpoint metadata). Pure function.
#ifndef TRAINYARD_COMMON_JSON_STRING_H_
#define TRAINYARD_COMMON_JSON_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace trainyard {

// Appends `s` to `out` as a quoted JSON string: quotes, backslashes and
// control characters escaped; other bytes (UTF-8 included) copied as they are.
void AppendJsonString(absl::string_view s, std::string* out);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_JSON_STRING_H_
