// With YARD_FUZZ_VERBOSE set, the fuzz targets print what each reader said
// about an input, so a new seed can be checked to reach the code it is
// meant to (a "valid" seed that a reader refuses covers only the refusal):
//   YARD_FUZZ_VERBOSE=1 build/fuzz/fuzz_checkpoint fuzz/corpus/checkpoint
// Silent otherwise; fuzzing runs never set it. Thread-compatible.
#ifndef TRAINYARD_FUZZ_FUZZ_REPORT_H_
#define TRAINYARD_FUZZ_FUZZ_REPORT_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace trainyard::fuzz {

inline void Report(const char* reader, const absl::Status& status) {
  static const bool verbose = std::getenv("YARD_FUZZ_VERBOSE") != nullptr;
  if (!verbose) return;
  std::printf("  %s: %s\n", reader,
              status.ok() ? "OK" : std::string(status.message()).c_str());
}

}  // namespace trainyard::fuzz

#endif  // TRAINYARD_FUZZ_FUZZ_REPORT_H_
