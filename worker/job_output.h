// What a job's output means: stdout lines that parse as TrainerEvent JSON
// are events, every other line is log; the last lines of stderr explain a
// failure. Pure functions and small value types, no I/O; not thread-safe
// (each job's reader owns its own).
#ifndef TRAINYARD_WORKER_JOB_OUTPUT_H_
#define TRAINYARD_WORKER_JOB_OUTPUT_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "trainyard/v1/trainer.pb.h"

namespace trainyard::worker {

// Cuts a byte stream into lines (without the '\n'). A line longer than
// max_line is emitted in max_line pieces so one endless line cannot grow
// without bound.
class LineSplitter {
 public:
  using LineFn = std::function<void(std::string_view line)>;

  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Appends `data`, calling `fn` for every line it completes.
  void Feed(std::string_view data, const LineFn& fn);
  // Emits the unterminated rest, if any (at end of stream).
  void Flush(const LineFn& fn);

 private:
  size_t max_line_;
  std::string partial_;
};

// The last lines of a stream, at most max_lines lines and about max_bytes
// bytes (the newest line is kept even when longer, cut to max_bytes).
class TailBuffer {
 public:
  explicit TailBuffer(size_t max_lines = 20, size_t max_bytes = 4096)
      : max_lines_(max_lines), max_bytes_(max_bytes) {}

  void AddLine(std::string_view line);
  // The kept lines joined by '\n' (no trailing newline).
  std::string Text() const;
  bool empty() const { return lines_.empty(); }

 private:
  size_t max_lines_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::deque<std::string> lines_;
};

// The event in `line` when it is one TrainerEvent in protobuf JSON with an
// event set; nullopt for anything else (plain text, other JSON). Unknown
// fields are ignored so a newer yard-train still reports what we know.
std::optional<trainyard::v1::TrainerEvent> ParseTrainerEventLine(
    std::string_view line);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_JOB_OUTPUT_H_
