// ThreadSanitizer builds only (YARD_TSAN, scripts/run-sanitized-tests.sh
// thread): tells ThreadSanitizer what absl::Mutex, absl::CondVar and
// absl::Notification order (ours, and gRPC's, which locks and waits with
// them). Debian's abseil is not built with ThreadSanitizer, so its locks'
// atomics and futex waits are invisible to it, and every field a Mutex
// guards would be reported as a race. Each call below stands in for the
// library's own (the program's definition wins over the shared library's
// for the program's calls), marks what the call orders on the object's
// address, and calls the library's function, found with dlsym(RTLD_NEXT):
// a Mutex unlock releases before it, a lock acquires after it (a TryLock
// when it locked); an Await, and a CondVar wait, does both (it unlocks and
// locks again around its wait), and so does each evaluation of an Await's
// condition; Notify releases and a wait for the notification acquires. Linked
// into every binary and test of such a build (cmake/yard.cmake).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

// The library's own definition of the function of mangled name `symbol`.
template <typename Fn>
Fn Real(const char* symbol) {
  void* f = dlsym(RTLD_NEXT, symbol);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: no %s in the loaded libraries\n",
                 symbol);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// Mangled names of the members stood in for, in Debian's inline namespace.
#define YARD_ABSL_NS "N4absl7debian3"

// An Await's condition as the library evaluates it: with the mutex held,
// by the waiting thread or by whichever thread unlocks, inside the
// library's wait. Each evaluation acquires and releases the mutex's order,
// as the lock around it would, so what the condition reads is ordered with
// the writes of the threads that held the lock before and after.
struct OrderedCondition {
  const absl::Condition* cond;
  void* mu;

  static bool Eval(void* arg) {
    auto* self = static_cast<OrderedCondition*>(arg);
    __tsan_acquire(self->mu);
    const bool met = self->cond->Eval();
    __tsan_release(self->mu);
    return met;
  }
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("_Z" YARD_ABSL_NS "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static auto real =
      Real<void (*)(Mutex*)>("_Z" YARD_ABSL_NS "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static auto real =
      Real<bool (*)(Mutex*)>("_Z" YARD_ABSL_NS "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  static auto real =
      Real<void (*)(Mutex*)>("_Z" YARD_ABSL_NS "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static auto real =
      Real<void (*)(Mutex*)>("_Z" YARD_ABSL_NS "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(
      "_Z" YARD_ABSL_NS "5Mutex5AwaitERKNS0_9ConditionE");
  OrderedCondition ordered{&cond, this};
  __tsan_release(this);
  real(this, Condition(&OrderedCondition::Eval, &ordered));
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "_Z" YARD_ABSL_NS
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  OrderedCondition ordered{&cond, this};
  __tsan_release(this);
  const bool met =
      real(this, Condition(&OrderedCondition::Eval, &ordered), timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "_Z" YARD_ABSL_NS
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  OrderedCondition ordered{&cond, this};
  __tsan_release(this);
  const bool met =
      real(this, Condition(&OrderedCondition::Eval, &ordered), deadline);
  __tsan_acquire(this);
  return met;
}

// A CondVar's wait unlocks and locks `mu` inside the library (gRPC's
// waits are CondVar waits).
void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>(
      "_Z" YARD_ABSL_NS "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "_Z" YARD_ABSL_NS "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "_Z" YARD_ABSL_NS "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("_Z" YARD_ABSL_NS
                                                   "12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  static auto real = Real<void (*)(const Notification*)>(
      "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_"
      "8DurationE");
  const bool notified = real(this, timeout);
  __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
