#include "common/clock.h"

namespace trainyard {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepUntil(absl::Time deadline) override {
    absl::Duration d = deadline - absl::Now();
    if (d > absl::ZeroDuration()) absl::SleepFor(d);
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();
  return clock;
}

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::SleepUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto reached = [this, deadline]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return now_ >= deadline;
  };
  mu_.Await(absl::Condition(&reached));
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

}  // namespace trainyard
