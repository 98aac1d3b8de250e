#include "server/checkpoint_access.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/field_errors.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"
#include "server/job_state.h"

namespace trainyard::server {
namespace {

// meta.json first: a client can check model.safetensors against it as the
// bytes arrive.
constexpr const char* kFiles[] = {engine::kCheckpointMetaFile,
                                  engine::kCheckpointTensorsFile};

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  // Hands the descriptor over: it is no longer closed here.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string Errno(int err) { return std::strerror(err); }

// The job's checkpoint directory, opened without following a symlink; an
// invalid Fd when it does not exist (the job has not checkpointed).
absl::StatusOr<Fd> OpenJobDir(const v1::Job& job) {
  if (job.checkpoint_dir().empty()) return Fd();
  Fd dir(open(job.checkpoint_dir().c_str(),
              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.ok() || errno == ENOENT) return dir;
  return absl::InternalError(absl::StrCat("job ", job.id(),
                                          ": cannot open its checkpoint "
                                          "directory: ",
                                          Errno(errno)));
}

// File `name` of checkpoint `dir_name`, whose directory `step_dir` is open:
// opened without following a symlink and checked to be a regular file (a
// trainer writes these files, maybe a hostile one), with its size.
// NOT_FOUND when it is not there, FAILED_PRECONDITION for a symlink or a
// file of another kind (a FIFO would block the reader).
absl::StatusOr<std::pair<Fd, int64_t>> OpenCheckpointFile(
    int step_dir, const std::string& dir_name, const char* name,
    const std::string& job_id) {
  Fd f(openat(step_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!f.ok() && errno == ELOOP) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, ": ", dir_name, "/", name,
                     " is a symbolic link; it is not sent"));
  }
  struct stat st;
  if (!f.ok() || fstat(f.get(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, ": ", dir_name, "/", name, " is gone"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, ": ", dir_name, "/", name, " is not a regular file"));
  }
  return std::make_pair(std::move(f), static_cast<int64_t>(st.st_size));
}

// checkpoint.keep_best's best of a job that ended without naming it (it
// was cancelled, hit its time limit or failed: only a run that finishes
// reports one): the best evaluation's step its newest checkpoint records
// (meta.json's early_stopping.best_step, at most that checkpoint's step).
// -1 when there is none, or it cannot be read.
int64_t BestStepRecorded(const v1::Job& job, int root, int64_t newest) {
  if (!IsTerminal(job.state()) || !job.spec().checkpoint().keep_best()) {
    return -1;
  }
  const std::string dir_name = engine::CheckpointDirName(newest);
  Fd step_dir(openat(root, dir_name.c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!step_dir.ok()) return -1;
  absl::StatusOr<std::pair<Fd, int64_t>> meta = OpenCheckpointFile(
      step_dir.get(), dir_name, engine::kCheckpointMetaFile, job.id());
  if (!meta.ok() || meta->second > engine::kMaxCheckpointMetaBytes) return -1;
  std::string text(static_cast<size_t>(meta->second), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = pread(meta->first.get(), text.data() + got,
                            text.size() - got, static_cast<off_t>(got));
    if (n <= 0) return -1;
    got += static_cast<size_t>(n);
  }
  absl::StatusOr<engine::CheckpointMeta> read =
      engine::ReadCheckpointMeta(text);
  if (!read.ok() || !read->early_stopping.has_value()) return -1;
  const int64_t best = read->early_stopping->best_step;
  return best > 0 && best <= newest ? best : -1;
}

absl::Status Missing(const v1::Job& job, int64_t step) {
  return absl::AbortedError(absl::StrCat(
      "job ", job.id(), ": checkpoint step ", step,
      " was removed (checkpoint.keep_last) before it could be sent; ask for "
      "it again, or for a newer one"));
}

}  // namespace

absl::StatusOr<std::vector<v1::CheckpointInfo>> ListJobCheckpoints(
    const v1::Job& job) {
  std::vector<v1::CheckpointInfo> out;
  ASSIGN_OR_RETURN(Fd root, OpenJobDir(job));
  if (!root.ok()) return out;
  // fdopendir takes the descriptor it is given: hand it a copy.
  DIR* dir = fdopendir(dup(root.get()));
  if (dir == nullptr) {
    return absl::InternalError(absl::StrCat(
        "job ", job.id(), ": cannot list its checkpoints: ", Errno(errno)));
  }
  while (const dirent* e = readdir(dir)) {
    const int64_t step = engine::StepFromDirName(e->d_name);
    if (step < 0) continue;
    Fd step_dir(openat(root.get(), e->d_name,
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!step_dir.ok()) continue;  // a symlink, or pruned meanwhile
    v1::CheckpointInfo info;
    info.set_step(step);
    bool complete = true;
    for (const char* name : kFiles) {
      struct stat st;
      if (fstatat(step_dir.get(), name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode)) {
        complete = false;
        break;
      }
      info.set_bytes(info.bytes() + st.st_size);
      if (std::string(name) == engine::kCheckpointMetaFile) {
        *info.mutable_save_time() =
            ToProtoTime(absl::TimeFromTimespec(st.st_mtim));
      }
    }
    if (!complete) continue;
    out.push_back(std::move(info));
  }
  closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const v1::CheckpointInfo& a, const v1::CheckpointInfo& b) {
              return a.step() > b.step();
            });
  if (out.empty()) return out;
  const int64_t best = !job.result().best_checkpoint_path().empty()
                           ? job.result().best_step()
                           : BestStepRecorded(job, root.get(), out[0].step());
  for (v1::CheckpointInfo& c : out) c.set_best(c.step() == best);
  return out;
}

absl::StatusOr<int64_t> PickCheckpoint(
    const v1::Job& job, const v1::DownloadCheckpointRequest& request) {
  if (request.step() < 0) {
    return InvalidFieldError(
        "step", absl::StrCat("must be >= 0, got ", request.step()));
  }
  if (request.best() && request.step() > 0) {
    return InvalidFieldError("best", "not with step: give one or the other");
  }
  ASSIGN_OR_RETURN(std::vector<v1::CheckpointInfo> all,
                   ListJobCheckpoints(job));
  const auto best = std::find_if(all.begin(), all.end(),
                                 [](const auto& c) { return c.best(); });
  // A best named by a finished run whose checkpoint is gone is NOT_FOUND
  // below, as for any step.
  if (request.best() && best == all.end() &&
      job.result().best_checkpoint_path().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(),
                     " has no best checkpoint: one is named when a job with "
                     "checkpoint.keep_best ends after an evaluation"));
  }
  if (all.empty()) {
    return absl::NotFoundError(
        absl::StrCat("job ", job.id(), " has no checkpoint yet"));
  }
  const int64_t want = !request.best()     ? request.step()
                       : best != all.end() ? best->step()
                                           : job.result().best_step();
  if (want == 0) return all.front().step();
  for (const v1::CheckpointInfo& c : all) {
    if (c.step() == want) return want;
  }
  std::vector<int64_t> steps;
  for (const v1::CheckpointInfo& c : all) steps.push_back(c.step());
  return absl::NotFoundError(
      absl::StrCat("job ", job.id(), " has no checkpoint of step ", want,
                   " (it has steps ", absl::StrJoin(steps, ", "), ")"));
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const v1::Job& job, int64_t step, const StreamFrom& from) {
  size_t first = 0;  // the file `from` names
  if (!from.file.empty()) {
    while (first < std::size(kFiles) && from.file != kFiles[first]) ++first;
    if (first == std::size(kFiles)) {
      return InvalidFieldError(
          "resume_file",
          absl::StrCat("\"", absl::CHexEscape(from.file.substr(0, 64)),
                       "\" is not a file of a checkpoint"));
    }
  }
  if (from.offset < 0 || (from.file.empty() && from.offset != 0)) {
    return InvalidFieldError(
        "resume_offset",
        absl::StrCat(from.offset, from.file.empty() ? " without resume_file"
                                                    : " is negative"));
  }
  ASSIGN_OR_RETURN(Fd root, OpenJobDir(job));
  if (!root.ok()) return Missing(job, step);
  const std::string dir_name = engine::CheckpointDirName(step);
  Fd step_dir(openat(root.get(), dir_name.c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!step_dir.ok()) return Missing(job, step);
  // Both files open before anything is read: the copy is of one
  // checkpoint even if the trainer prunes it meanwhile.
  std::unique_ptr<CheckpointReader> reader(
      new CheckpointReader(job.id(), step, first, from.offset));
  for (const char* name : kFiles) {
    absl::StatusOr<std::pair<Fd, int64_t>> file =
        OpenCheckpointFile(step_dir.get(), dir_name, name, job.id());
    if (absl::IsNotFound(file.status())) return Missing(job, step);
    if (!file.ok()) return file.status();
    reader->files_.push_back({file->first.release(), file->second, name});
  }
  if (from.offset > reader->files_[first].size) {
    return InvalidFieldError(
        "resume_offset",
        absl::StrCat(from.offset, " is past the end of ", dir_name, "/",
                     from.file, " (", reader->files_[first].size, " bytes)"));
  }
  return reader;
}

CheckpointReader::~CheckpointReader() {
  for (const File& f : files_) close(f.fd);
}

absl::StatusOr<CheckpointReader::Got> CheckpointReader::Next(
    v1::CheckpointChunk& chunk, Read how) {
  for (; file_ < files_.size(); ++file_, offset_ = 0, file_started_ = false) {
    const File& f = files_[file_];
    // Read to its end, or an empty one not yet sent.
    if (offset_ < f.size || (offset_ == 0 && !file_started_)) break;
  }
  if (file_ == files_.size()) return Got::kDone;
  const File& f = files_[file_];
  const int64_t n = std::min(kCheckpointChunkBytes, f.size - offset_);
  std::string& data = *chunk.mutable_data();
  data.resize(static_cast<size_t>(n));
  const int flags = how == Read::kCachedOnly ? RWF_NOWAIT : 0;
  while (partial_ < n) {
    iovec v{data.data() + partial_, static_cast<size_t>(n - partial_)};
    const ssize_t r = preadv2(f.fd, &v, 1, offset_ + partial_, flags);
    if (r < 0 && errno == EINTR) continue;
    // Not in memory, or a file system without RWF_NOWAIT.
    if (r < 0 && flags != 0 && (errno == EAGAIN || errno == EOPNOTSUPP)) {
      return Got::kWouldWait;
    }
    if (r <= 0) {
      partial_ = 0;
      return absl::InternalError(absl::StrCat(
          "job ", job_id_, ": reading ", engine::CheckpointDirName(step_), "/",
          f.name, ": ", r < 0 ? Errno(errno) : "the file got shorter"));
    }
    partial_ += r;
  }
  partial_ = 0;
  chunk.set_step(step_);
  chunk.set_file(f.name);
  chunk.set_file_size(f.size);
  chunk.set_offset(offset_);
  offset_ += n;
  file_started_ = true;
  return Got::kChunk;
}

}  // namespace trainyard::server
