#include "tests/waits.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "tests/cluster.h"

namespace trainyard::itest {
namespace v1 = trainyard::v1;

absl::Status PollUntil(absl::string_view what, absl::Duration timeout,
                       const std::function<bool()>& probe) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(5);
  while (true) {
    if (probe()) return absl::OkStatus();
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                       " waiting for ", what));
    }
    std::this_thread::sleep_for(
        absl::ToChronoNanoseconds(std::min(backoff, left)));
    backoff = std::min(backoff * 2, absl::Milliseconds(250));
  }
}

int CountTrainerEvents(const std::vector<v1::JobEvent>& events,
                       v1::TrainerEvent::EventCase kind) {
  int n = 0;
  for (const v1::JobEvent& e : events) {
    n += e.has_trainer() && e.trainer().event_case() == kind;
  }
  return n;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED ||
         state == v1::CANCELLED;
}

std::string StateName(v1::JobState state) { return v1::JobState_Name(state); }

std::vector<v1::TrainStarted> TrainStartedEvents(
    const std::vector<v1::JobEvent>& events) {
  std::vector<v1::TrainStarted> out;
  for (const auto& e : events) {
    if (e.has_trainer() && e.trainer().has_started()) {
      out.push_back(e.trainer().started());
    }
  }
  return out;
}

std::string DescribeEvents(const std::vector<v1::JobEvent>& events) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  for (const auto& e : events) {
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(e, &json, opts);
    absl::StrAppend(&out, "  ", json, "\n");
  }
  return out.empty() ? "  (no events)\n" : out;
}

WatchResult Watch(v1::JobService::Stub& jobs, const std::string& job_id,
                  int64_t after_sequence, absl::Duration timeout,
                  const std::function<bool(const v1::JobEvent&)>& until) {
  WatchResult result;
  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(timeout);
  grpc::ClientContext& ctx = *context;
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_after_sequence(after_sequence);
  auto reader = jobs.WatchJob(&ctx, req);
  v1::JobEvent event;
  while (reader->Read(&event)) {
    result.events.push_back(event);
    if (until && until(event)) {
      result.stopped = true;
      ctx.TryCancel();
      break;
    }
  }
  if (result.stopped) {
    // Drain so Finish does not block on a message in flight.
    while (reader->Read(&event)) {
    }
  }
  result.status = reader->Finish();
  return result;
}

absl::StatusOr<v1::JobEvent> WaitForEvent(
    v1::JobService::Stub& jobs, const std::string& job_id,
    absl::string_view what, absl::Duration timeout,
    const std::function<bool(const v1::JobEvent&)>& pred) {
  WatchResult w = Watch(jobs, job_id, 0, timeout, pred);
  if (w.stopped) return w.events.back();
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", job_id, ": no ", what, " within ", absl::FormatDuration(timeout),
      "; the watch ended with ", CodeName(w.status.error_code()), " ",
      w.status.error_message(), " after these events:\n",
      DescribeEvents(w.events)));
}

bool IsStateChangeTo(const v1::JobEvent& e, v1::JobState state) {
  return e.has_state_change() && e.state_change().to() == state;
}

bool IsCheckpointSaved(const v1::JobEvent& e) {
  return e.has_trainer() && e.trainer().has_checkpoint();
}

bool IsTrainProgress(const v1::JobEvent& e) {
  return e.has_trainer() && e.trainer().has_progress();
}

absl::StatusOr<v1::JobEvent> WaitForState(v1::JobService::Stub& jobs,
                                          const std::string& job_id,
                                          v1::JobState state,
                                          absl::Duration timeout) {
  return WaitForEvent(
      jobs, job_id, absl::StrCat("state change to ", StateName(state)), timeout,
      [state](const v1::JobEvent& e) { return IsStateChangeTo(e, state); });
}

absl::StatusOr<v1::JobEvent> WaitForStateChange(v1::JobService::Stub& jobs,
                                                const std::string& job_id,
                                                v1::JobState from,
                                                v1::JobState to,
                                                absl::Duration timeout) {
  return WaitForEvent(
      jobs, job_id, absl::StrCat(StateName(from), " -> ", StateName(to)),
      timeout, [from, to](const v1::JobEvent& e) {
        return e.has_state_change() && e.state_change().from() == from &&
               e.state_change().to() == to;
      });
}

absl::StatusOr<v1::Job> WaitForTerminal(v1::JobService::Stub& jobs,
                                        const std::string& job_id,
                                        absl::Duration timeout) {
  WatchResult w = Watch(jobs, job_id, 0, timeout);
  bool terminal = !w.events.empty() && w.events.back().has_state_change() &&
                  IsTerminal(w.events.back().state_change().to());
  if (!w.status.ok() || !terminal) {
    return absl::DeadlineExceededError(absl::StrCat(
        "job ", job_id, " did not reach a terminal state within ",
        absl::FormatDuration(timeout), "; the watch ended with ",
        CodeName(w.status.error_code()), " ", w.status.error_message(),
        " after these events:\n", DescribeEvents(w.events)));
  }
  return GetJob(jobs, job_id);
}

::testing::AssertionResult ConsecutiveToTerminal(
    const std::vector<v1::JobEvent>& events, int64_t first,
    v1::JobState terminal) {
  if (events.empty()) return ::testing::AssertionFailure() << "no events";
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].sequence() != first + static_cast<int64_t>(i)) {
      return ::testing::AssertionFailure()
             << "expected sequence " << first + static_cast<int64_t>(i)
             << " at position " << i << ":\n"
             << DescribeEvents(events);
    }
  }
  if (!IsStateChangeTo(events.back(), terminal)) {
    return ::testing::AssertionFailure()
           << "the last event is not the change to " << StateName(terminal)
           << ":\n"
           << DescribeEvents(events);
  }
  return ::testing::AssertionSuccess();
}

absl::StatusOr<std::vector<v1::JobEvent>> ParseJsonEventLines(
    const std::string& text) {
  std::vector<v1::JobEvent> out;
  for (absl::string_view line :
       absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    v1::JobEvent e;
    auto s = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(line.data(), line.size()), &e);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a JobEvent in JSON: ", line, " (",
                       s.message().as_string(), ")"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<v1::Job> GetJob(v1::JobService::Stub& jobs,
                               const std::string& job_id) {
  auto ctx = ContextWithTimeout();
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  grpc::Status s = jobs.GetJob(ctx.get(), req, &job);
  if (!s.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat("GetJob ", job_id, ": ", s.error_message()));
  }
  return job;
}

absl::StatusOr<std::vector<v1::Job>> ListAllJobs(v1::JobService::Stub& jobs,
                                                 int page_size) {
  std::vector<v1::Job> out;
  std::string token;
  for (int page = 0; page < 10'000; ++page) {
    auto ctx = ContextWithTimeout();
    v1::ListJobsRequest req;
    req.set_page_size(page_size);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs.ListJobs(ctx.get(), req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("ListJobs: ", s.error_message()));
    }
    for (const auto& j : resp.jobs()) out.push_back(j);
    if (resp.next_page_token().empty()) return out;
    token = resp.next_page_token();
  }
  return absl::InternalError("ListJobs: page tokens never ended");
}

absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
    v1::ClusterService::Stub& cluster) {
  auto ctx = ContextWithTimeout();
  v1::ListWorkersResponse resp;
  grpc::Status s = cluster.ListWorkers(ctx.get(), {}, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "ListWorkers: ", CodeName(s.error_code()), " ", s.error_message()));
  }
  return resp;
}

std::string DescribeWorkers(const v1::ListWorkersResponse& resp) {
  std::vector<std::string> parts;
  for (const auto& w : resp.workers()) {
    parts.push_back(absl::StrCat(w.id(), "=", v1::WorkerState_Name(w.state())));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

absl::Status WaitForReadyWorkers(v1::ClusterService::Stub& cluster,
                                 const std::vector<std::string>& names,
                                 absl::Duration timeout) {
  std::string seen = "nothing yet";
  absl::Status s = PollUntil(
      absl::StrCat("workers [", absl::StrJoin(names, ", "), "] to be READY"),
      timeout, [&] {
        auto resp = ListWorkers(cluster);
        if (!resp.ok()) {
          seen = std::string(resp.status().message());
          return false;
        }
        seen = DescribeWorkers(*resp);
        return std::all_of(names.begin(), names.end(), [&](const auto& n) {
          return std::any_of(resp->workers().begin(), resp->workers().end(),
                             [&](const v1::Worker& w) {
                               return w.id() == n &&
                                      w.state() == v1::WORKER_READY;
                             });
        });
      });
  if (s.ok()) return s;
  return absl::DeadlineExceededError(
      absl::StrCat(s.message(), "; last seen: ", seen));
}

absl::StatusOr<v1::Worker> WaitForWorker(
    v1::ClusterService::Stub& cluster, const std::string& name,
    const std::string& what, const std::function<bool(const v1::Worker&)>& done,
    absl::Duration timeout) {
  std::string seen = "nothing yet";
  v1::Worker found;
  absl::Status s =
      PollUntil(absl::StrCat("worker ", name, " ", what), timeout, [&] {
        auto resp = ListWorkers(cluster);
        if (!resp.ok()) return false;
        seen = DescribeWorkers(*resp);
        for (const v1::Worker& w : resp->workers()) {
          if (w.id() == name && done(w)) {
            found = w;
            return true;
          }
        }
        return false;
      });
  if (s.ok()) return found;
  return absl::DeadlineExceededError(
      absl::StrCat(s.message(), "; last seen: ", seen));
}

absl::Status WaitForWorkerLost(v1::ClusterService::Stub& cluster,
                               const std::string& name,
                               absl::Duration timeout) {
  std::string seen = "nothing yet";
  absl::Status s =
      PollUntil(absl::StrCat("worker ", name, " to be LOST"), timeout, [&] {
        auto resp = ListWorkers(cluster);
        if (!resp.ok()) return false;
        seen = DescribeWorkers(*resp);
        return std::none_of(resp->workers().begin(), resp->workers().end(),
                            [&](const v1::Worker& w) {
                              return w.id() == name &&
                                     w.state() != v1::WORKER_LOST;
                            });
      });
  if (s.ok()) return s;
  return absl::DeadlineExceededError(
      absl::StrCat(s.message(), "; last seen: ", seen));
}

}  // namespace trainyard::itest
