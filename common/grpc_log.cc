#include "common/grpc_log.h"

#include <grpc/support/log.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace trainyard {

bool RepeatFilter::Show(const std::string& source, absl::Time now,
                        int64_t* held_back) {
  absl::MutexLock lock(&mu_);
  auto [it, first] = seen_.try_emplace(source);
  Seen& s = it->second;
  if (!first && now - s.shown < window_) {
    ++s.held_back;
    return false;
  }
  *held_back = s.held_back;
  s.shown = now;
  s.held_back = 0;
  return true;
}

namespace {

RepeatFilter& GrpcFilter() {
  static RepeatFilter* filter = new RepeatFilter(absl::Minutes(1));
  return *filter;
}

void LogGrpcLine(gpr_log_func_args* args) {
  const char* file = args->file != nullptr ? args->file : "grpc";
  int64_t held_back = 0;
  if (!GrpcFilter().Show(absl::StrCat(file, ":", args->line), absl::Now(),
                         &held_back)) {
    return;
  }
  LogMessage line(args->severity == GPR_LOG_SEVERITY_ERROR ? LogLevel::kWarning
                                                           : LogLevel::kInfo,
                  file, args->line);
  line.stream() << "grpc: " << (args->message != nullptr ? args->message : "");
  if (held_back > 0) {
    line.stream() << " (" << held_back
                  << " more from here in the last minute not shown)";
  }
}

}  // namespace

void RouteGrpcLogs() {
  if (std::getenv("GRPC_VERBOSITY") != nullptr) return;
  gpr_set_log_function(LogGrpcLine);
}

}  // namespace trainyard
