#include "worker/server_contact.h"

#include <algorithm>

namespace trainyard::worker {

void ServerContact::HelloAnswered(absl::Time hello_sent, absl::Duration lease,
                                  absl::Duration heartbeat_interval) {
  armed_ = lease > absl::ZeroDuration();
  heard_ = hello_sent;
  lease_ = lease;
  margin_ = std::min(heartbeat_interval, lease / 4);
}

void ServerContact::HeartbeatSent(int64_t sequence, absl::Time sent) {
  in_flight_.emplace_back(sequence, sent);
}

void ServerContact::HeartbeatAnswered(int64_t sequence) {
  while (!in_flight_.empty() && in_flight_.front().first <= sequence) {
    if (in_flight_.front().first == sequence) {
      heard_ = std::max(heard_, in_flight_.front().second);
    }
    in_flight_.pop_front();
  }
}

absl::Time ServerContact::Deadline() const {
  if (!armed_) return absl::InfiniteFuture();
  return heard_ + lease_ - margin_;
}

}  // namespace trainyard::worker
