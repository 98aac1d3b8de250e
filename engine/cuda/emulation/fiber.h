// A Fiber is a user-level thread: a function with a stack of its own that
// runs on the calling OS thread until it yields, then continues where it
// left off at the next Resume. The CUDA emulation runs every thread of an
// emulated block as a Fiber on one OS thread (block_runner.h), so it alone
// decides which CUDA thread runs next, and a barrier costs a switch rather
// than an OS wait. Stacks are mmap'd with a guard page below: an overflow
// faults instead of corrupting a neighbour. On x86-64 a switch saves and
// restores the callee-saved registers and the floating-point control words
// in a few instructions (an emulated grid of millions of threads makes
// millions of switches); elsewhere, or with TRAINYARD_EMULATION_UCONTEXT
// defined, it is ucontext's swapcontext, a system call each (the signal
// mask, which no emulated thread changes).
//
// AddressSanitizer is told of every switch. ThreadSanitizer cannot follow
// the emulated threads' synchronization through these switches and would
// report nonsense, so a TSan build is refused at compile time; the
// emulation finds a block's races by running its threads in different
// orders instead (block_runner.h).
//
// Thread-safety: a Fiber is resumed by one OS thread at a time, and only
// from outside any fiber; Yield acts on the fiber running on the calling
// OS thread.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_FIBER_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_FIBER_H_

#include <cstddef>

#if defined(__x86_64__) && !defined(TRAINYARD_EMULATION_UCONTEXT)
#define TRAINYARD_EMULATION_STACK_SWITCH 1
#else
#include <ucontext.h>
#endif

#if defined(__SANITIZE_THREAD__)
#error "the CUDA emulation's fibers do not work under ThreadSanitizer"
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#error "the CUDA emulation's fibers do not work under ThreadSanitizer"
#endif
#endif

namespace trainyard::cuda_emulation {

class Fiber {
 public:
  // A fiber with a stack of at least stack_bytes; aborts if the memory
  // cannot be mapped (a test tool has no one to return the error to).
  explicit Fiber(size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Makes the next Resume run entry(arg) from the start, forgetting
  // whatever the fiber was doing. REQUIRES: not running.
  void Start(void (*entry)(void*), void* arg);

  // Runs the fiber until it yields, exits or returns from its entry.
  // REQUIRES: started and not finished; not called from inside a fiber.
  void Resume();

  // Whether the entry returned or the fiber exited.
  bool finished() const { return finished_; }

  // From inside a running fiber: back to the Resume that ran it.
  static void Yield();

 private:
  static void Trampoline();
  void SwitchOut(bool forever);

  char* mapping_ = nullptr;  // guard page, then the stack
  size_t mapping_bytes_ = 0;
  char* stack_ = nullptr;
  size_t stack_bytes_ = 0;
#ifdef TRAINYARD_EMULATION_STACK_SWITCH
  void* sp_ = nullptr;  // while switched out: where its registers are
#else
  ucontext_t context_;
#endif
  void (*entry_)(void*) = nullptr;
  void* arg_ = nullptr;
  bool finished_ = true;
  void* fake_stack_ = nullptr;  // AddressSanitizer's, while switched out
};

}  // namespace trainyard::cuda_emulation

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_FIBER_H_
