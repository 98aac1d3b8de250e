#include "worker/job_output.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"

namespace trainyard::worker {

void LineSplitter::Feed(std::string_view data, const LineFn& fn) {
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const size_t take =
        newline == std::string_view::npos ? data.size() : newline;
    const size_t room = max_line_ - partial_.size();
    if (take > room) {
      // Too long for one line: emit what fits and carry on with the rest.
      partial_.append(data.substr(0, room));
      fn(partial_);
      partial_.clear();
      data.remove_prefix(room);
      continue;
    }
    partial_.append(data.substr(0, take));
    if (newline == std::string_view::npos) return;
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    fn(partial_);
    partial_.clear();
    data.remove_prefix(newline + 1);
  }
}

void LineSplitter::Flush(const LineFn& fn) {
  if (partial_.empty()) return;
  fn(partial_);
  partial_.clear();
}

void TailBuffer::AddLine(std::string_view line) {
  if (line.size() > max_bytes_) line = line.substr(line.size() - max_bytes_);
  lines_.emplace_back(line);
  bytes_ += line.size() + 1;
  while (lines_.size() > 1 &&
         (lines_.size() > max_lines_ || bytes_ > max_bytes_ + 1)) {
    bytes_ -= lines_.front().size() + 1;
    lines_.pop_front();
  }
}

std::string TailBuffer::Text() const { return absl::StrJoin(lines_, "\n"); }

std::optional<trainyard::v1::TrainerEvent> ParseTrainerEventLine(
    std::string_view line) {
  std::string_view trimmed = line;
  while (!trimmed.empty() && absl::ascii_isspace(trimmed.front()))
    trimmed.remove_prefix(1);
  while (!trimmed.empty() && absl::ascii_isspace(trimmed.back()))
    trimmed.remove_suffix(1);
  if (trimmed.size() < 2 || trimmed.front() != '{' || trimmed.back() != '}') {
    return std::nullopt;
  }
  trainyard::v1::TrainerEvent event;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(trimmed.data(), trimmed.size()), &event,
      options);
  if (!status.ok() ||
      event.event_case() == trainyard::v1::TrainerEvent::EVENT_NOT_SET) {
    return std::nullopt;
  }
  return event;
}

}  // namespace trainyard::worker
