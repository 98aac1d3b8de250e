// Attempt directories: each attempt a worker runs gets
// WORK_DIR/jobs/<job id>/<attempt>, holding its spec and a copy of its log
// (the server keeps the log too: every line is also sent to it). Without
// pruning they pile up for every job the worker ever ran, logs and all, and
// a long-lived worker fills its disk. PruneAttemptDirs keeps the most
// recently used ones of the attempts that have ended (for looking at a
// recent failure on the node) and removes the rest.
//
// Thread-compatible: the caller serializes calls and keeps the attempts it
// names active from being started or removed meanwhile.
#ifndef TRAINYARD_WORKER_ATTEMPT_DIRS_H_
#define TRAINYARD_WORKER_ATTEMPT_DIRS_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace trainyard::worker {

// (job id, attempt).
using AttemptKey = std::pair<std::string, int32_t>;

// Removes the directories JOBS_DIR/<job>/<attempt> (a whole number) of every
// attempt not in `active` but the `keep` last modified ones (the later of
// the directory's and its log's modification time), then the job
// directories left empty. Anything else under JOBS_DIR (a job's local
// checkpoints directory, stray files) is left alone, and a directory that
// cannot be removed is skipped with a warning. Returns how many attempt
// directories it removed.
int PruneAttemptDirs(const std::string& jobs_dir,
                     const std::set<AttemptKey>& active, int keep);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_ATTEMPT_DIRS_H_
