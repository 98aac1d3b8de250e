// Fibers on ucontext: makecontext gives a fresh fiber its stack and entry,
// swapcontext switches. See fiber.h.
#include "engine/cuda/emulation/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define TRAINYARD_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINYARD_EMULATION_ASAN 1
#endif
#endif

#ifdef TRAINYARD_EMULATION_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace trainyard::cuda_emulation {
namespace {

// What the OS thread resuming fibers keeps: where to switch back to.
struct ResumingThread {
  ucontext_t context;
  Fiber* running = nullptr;
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;  // learnt from AddressSanitizer
  size_t stack_size = 0;
};
thread_local ResumingThread resuming;

// AddressSanitizer must know the stack each switch lands on; save == nullptr
// says the stack being left is never returned to.
void StartSwitch([[maybe_unused]] void** save,
                 [[maybe_unused]] const void* bottom,
                 [[maybe_unused]] size_t size) {
#ifdef TRAINYARD_EMULATION_ASAN
  __sanitizer_start_switch_fiber(save, bottom, size);
#endif
}

void FinishSwitch([[maybe_unused]] void* save,
                  [[maybe_unused]] const void** old_bottom,
                  [[maybe_unused]] size_t* old_size) {
#ifdef TRAINYARD_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(save, old_bottom, old_size);
#endif
}

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::abort();
}

}  // namespace

Fiber::Fiber(size_t stack_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes_ + page;
  void* m = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) Die("cuda emulation: mmap of a fiber stack");
  mapping_ = static_cast<char*>(m);
  if (mprotect(mapping_, page, PROT_NONE) != 0) {
    Die("cuda emulation: mprotect of a fiber stack's guard page");
  }
  stack_ = mapping_ + page;
}

Fiber::~Fiber() { munmap(mapping_, mapping_bytes_); }

void Fiber::Start(void (*entry)(void*), void* arg) {
  if (getcontext(&context_) != 0) Die("cuda emulation: getcontext");
  context_.uc_stack.ss_sp = stack_;
  context_.uc_stack.ss_size = stack_bytes_;
  context_.uc_link = nullptr;
  makecontext(&context_, &Fiber::Trampoline, 0);
  entry_ = entry;
  arg_ = arg;
  finished_ = false;
}

void Fiber::Resume() {
  resuming.running = this;
  StartSwitch(&resuming.fake_stack, stack_, stack_bytes_);
  swapcontext(&resuming.context, &context_);
  FinishSwitch(resuming.fake_stack, nullptr, nullptr);
  resuming.running = nullptr;
}

void Fiber::Trampoline() {
  FinishSwitch(nullptr, &resuming.stack_bottom, &resuming.stack_size);
  Fiber* self = resuming.running;
  self->entry_(self->arg_);
  self->finished_ = true;
  self->SwitchOut(/*forever=*/true);
}

void Fiber::Yield() { resuming.running->SwitchOut(/*forever=*/false); }

void Fiber::SwitchOut(bool forever) {
  StartSwitch(forever ? nullptr : &fake_stack_, resuming.stack_bottom,
              resuming.stack_size);
  swapcontext(&context_, &resuming.context);
  FinishSwitch(fake_stack_, &resuming.stack_bottom, &resuming.stack_size);
}

}  // namespace trainyard::cuda_emulation
