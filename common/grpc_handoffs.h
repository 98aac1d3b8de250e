// What gRPC's callback API orders between threads, told to
// ThreadSanitizer.
//
// gRPC runs a reactor's reactions (OnReadDone, OnWriteDone, OnCancel,
// OnDone) and a server interceptor's hooks on its own threads, each after
// what caused it (the handler returning the reactor, StartRead,
// StartWrite, Finish, TryCancel), and orders them with its own atomics.
// Debian's gRPC is not built with ThreadSanitizer, so a ThreadSanitizer
// build (scripts/run-sanitized-tests.sh thread) sees none of that order,
// and every field a reaction reads after another thread wrote it would be
// reported as a race. A reactor holds a GrpcHandoffs and marks each hand-off
// and each reaction; an interceptor's hook runs in a
// GrpcObjectsOnlyScope. In other builds the calls do nothing.
#ifndef TRAINYARD_COMMON_GRPC_HANDOFFS_H_
#define TRAINYARD_COMMON_GRPC_HANDOFFS_H_

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace trainyard {

class GrpcHandoffs {
 public:
  // What a reactor hands to gRPC; each is followed by its reaction.
  enum Op {
    kReturn,  // the handler returns the reactor: before any reaction
    kRead,    // StartRead: OnReadDone
    kWrite,   // StartWrite: OnWriteDone
    kCancel,  // TryCancel: OnCancel
    kFinish,  // Finish: OnDone
    kOps,
  };

  // Marks a reaction to `op`, from construction until destruction (which
  // must come before the reactor's OnDone may run).
  class Reaction {
   public:
    Reaction(GrpcHandoffs* h, Op op) : h_(h) {
      h_->Acquire(kReturn);
      h_->Acquire(op);
    }
    ~Reaction() { h_->Release(kReactionsEnded); }
    Reaction(const Reaction&) = delete;
    Reaction& operator=(const Reaction&) = delete;

   private:
    GrpcHandoffs* const h_;
  };

  // Before the call that hands `op` to gRPC.
  void Handing(Op op) { Release(op); }
  // At OnDone: after every hand-off and every reaction.
  void Done() {
    for (int op = 0; op <= kReactionsEnded; ++op) Acquire(op);
  }

 private:
  static constexpr int kReactionsEnded = kOps;

#if defined(__SANITIZE_THREAD__)
  void Release(int op) { __tsan_release(&tags_[op]); }
  void Acquire(int op) { __tsan_acquire(&tags_[op]); }
  char tags_[kReactionsEnded + 1] = {};
#else
  void Release(int) {}
  void Acquire(int) {}
#endif
};

// Where code reads and writes only objects that gRPC owns and hands over
// (an interceptor's InterceptorBatchMethods): ThreadSanitizer ignores the
// accesses, whose order gRPC keeps and it cannot see. Our own state
// touched there must be atomics, whose order it still sees.
class GrpcObjectsOnlyScope {
 public:
#if defined(__SANITIZE_THREAD__)
  GrpcObjectsOnlyScope() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~GrpcObjectsOnlyScope() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  GrpcObjectsOnlyScope() {}  // user-provided: a scope is not "unused"
  ~GrpcObjectsOnlyScope() {}
#endif
  GrpcObjectsOnlyScope(const GrpcObjectsOnlyScope&) = delete;
  GrpcObjectsOnlyScope& operator=(const GrpcObjectsOnlyScope&) = delete;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_HANDOFFS_H_
