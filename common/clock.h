// Clock: the source of time for everything that waits or times out, so tests
// can inject a FakeClock instead of sleeping. RealClock and FakeClock are
// safe for concurrent use.
#ifndef TRAINYARD_COMMON_CLOCK_H_
#define TRAINYARD_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Blocks until Now() >= deadline.
  virtual void SleepUntil(absl::Time deadline) = 0;

  // The process-wide real clock.
  static Clock* Real();
};

// A clock that moves only when told to. SleepUntil blocks until Advance
// moves the time past the deadline.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24));
  absl::Time Now() const override;
  void SleepUntil(absl::Time deadline) override;
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CLOCK_H_
