// yard_progress_store_bench: what a job's progress reports cost the store.
// For each report a worker forwards, yard-server runs one JobStore write:
// the job's progress field set and the TrainerEvent appended, with
// telemetry durability (server/job_store.h), and since schema 7 the point
// added to the job's training curve. Here --jobs threads each own one job
// and write --reports progress reports to it, a step apart, every
// --eval-every-th report followed by an evaluation, as fast as the store
// takes them; then each job's curve is read --reads times
// (JobStore::ReadMetrics, what GetJobMetrics serves).
//
//   yard_progress_store_bench [--jobs 8] [--reports 5000] [--eval-every 10]
//                             [--reads 200] [--dir DIR]
//
// The store is a fresh trainyard.db under --dir (default: a new directory
// under /tmp, removed at the end); its defaults keep 1,000 trainer events
// and 1,000 points a curve series, so a run past 1,000 reports a job
// thins. Output: "write reports: N, X/s, p50 Y us, p99 Z us" and
// "read curves: N, p50 ..., p99 ..., P points each".
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/load/server_process.h"
#include "server/job_store.h"

namespace {

namespace v1 = trainyard::v1;
using trainyard::server::Durability;
using trainyard::server::JobRecord;
using trainyard::server::JobStore;
using trainyard::server::JobStoreOptions;

struct Flags {
  int jobs = 8;
  int reports = 5000;
  int eval_every = 10;
  int reads = 200;
  std::string dir;
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "%s: missing value\n", name.c_str());
      return false;
    }
    const std::string value = argv[++i];
    int* number = name == "--jobs"         ? &f.jobs
                  : name == "--reports"    ? &f.reports
                  : name == "--eval-every" ? &f.eval_every
                  : name == "--reads"      ? &f.reads
                                           : nullptr;
    if (number != nullptr) {
      if (!absl::SimpleAtoi(value, number) || *number < 1) {
        fprintf(stderr, "%s: not a positive integer: %s\n", name.c_str(),
                value.c_str());
        return false;
      }
    } else if (name == "--dir") {
      f.dir = value;
    } else {
      fprintf(stderr, "unknown flag %s\n", name.c_str());
      return false;
    }
  }
  return true;
}

void Report(const char* what, std::vector<double> us, double seconds,
            const std::string& extra) {
  std::sort(us.begin(), us.end());
  printf("%s: %zu, %.0f/s, p50 %.1f us, p99 %.1f us%s\n", what, us.size(),
         seconds > 0 ? us.size() / seconds : 0.0,
         trainyard::bench::Percentile(us, 0.50),
         trainyard::bench::Percentile(us, 0.99), extra.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f)) return 2;
  const bool own_dir = f.dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/yard-progress-bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      perror("mkdtemp");
      return 1;
    }
    f.dir = tmpl;
  }
  JobStoreOptions options;
  options.path = f.dir + "/trainyard.db";
  auto store = JobStore::Open(options);
  if (!store.ok()) {
    fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> ids;
  for (int j = 0; j < f.jobs; ++j) {
    v1::Job job;
    job.set_tenant("bench");
    job.mutable_spec()->set_steps(f.reports);
    auto created = (*store)->CreateJob(job);
    if (!created.ok()) {
      fprintf(stderr, "%s\n", created.status().ToString().c_str());
      return 1;
    }
    ids.push_back(created->record.job.id());
  }

  std::vector<std::vector<double>> write_us(f.jobs);
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int j = 0; j < f.jobs; ++j) {
    threads.emplace_back([&, j] {
      for (int step = 1; step <= f.reports; ++step) {
        const absl::Time t0 = absl::Now();
        auto r = (*store)->UpdateJob(
            ids[j], Durability::kTelemetry,
            [&](JobRecord& record, std::vector<v1::JobEvent>& events) {
              v1::TrainProgress p;
              p.set_step(step);
              p.set_total_steps(f.reports);
              p.set_loss(4.0 / step);
              p.set_lr(6e-4);
              p.set_tokens_per_second(5e5);
              *record.job.mutable_progress() = p;
              *events.emplace_back().mutable_trainer()->mutable_progress() = p;
              if (step % f.eval_every == 0) {
                v1::EvalResult* e =
                    events.emplace_back().mutable_trainer()->mutable_eval();
                e->set_step(step);
                e->set_loss(4.5 / step);
              }
              return true;
            });
        if (!r.ok()) {
          fprintf(stderr, "%s\n", r.status().ToString().c_str());
          exit(1);
        }
        write_us[j].push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double write_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all;
  for (const auto& v : write_us) all.insert(all.end(), v.begin(), v.end());
  printf("%d jobs x %d progress reports (an evaluation every %d), %s\n", f.jobs,
         f.reports, f.eval_every, options.path.c_str());
  Report("write reports", all, write_s, "");

  std::vector<double> read_us;
  int points = 0;
  const absl::Time read_start = absl::Now();
  for (int i = 0; i < f.reads; ++i) {
    const absl::Time t0 = absl::Now();
    auto m = (*store)->ReadMetrics(ids[i % f.jobs]);
    if (!m.ok()) {
      fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    read_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
    points = m->points_size();
  }
  Report("read curves", read_us,
         absl::ToDoubleSeconds(absl::Now() - read_start),
         absl::StrCat(", ", points, " points each"));
  store->reset();
  if (own_dir) std::filesystem::remove_all(f.dir);
  return 0;
}
