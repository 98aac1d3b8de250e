// Fibers: a fresh fiber's stack is laid out as if it had switched out just
// before its entry (x86-64), or is given to makecontext (ucontext);
// switches are TrainyardEmulationSwitch below, or swapcontext. See
// fiber.h.
#include "engine/cuda/emulation/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
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
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef TRAINYARD_EMULATION_STACK_SWITCH
// Saves the callee-saved registers and control words on the current stack,
// stores its pointer in *save_sp, and continues on load_sp's stack,
// restoring what a previous switch (or Fiber::Start) left there. To its
// caller it is a call that returns when something switches back.
extern "C" void TrainyardEmulationSwitch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text
  .p2align 4
  .globl TrainyardEmulationSwitch
  .hidden TrainyardEmulationSwitch
  .type TrainyardEmulationSwitch, @function
TrainyardEmulationSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size TrainyardEmulationSwitch, .-TrainyardEmulationSwitch
  .popsection
)");
#endif

namespace trainyard::cuda_emulation {
namespace {

// What the OS thread resuming fibers keeps: where to switch back to.
struct ResumingThread {
#ifdef TRAINYARD_EMULATION_STACK_SWITCH
  void* sp = nullptr;
#else
  ucontext_t context;
#endif
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
#ifdef TRAINYARD_EMULATION_ASAN
  // The last run on this stack left it for good from inside its frames,
  // whose redzones AddressSanitizer still marks: clear them, or the next
  // run's frames would trip on them.
  __asan_unpoison_memory_region(stack_, stack_bytes_);
#endif
#ifdef TRAINYARD_EMULATION_STACK_SWITCH
  // What TrainyardEmulationSwitch pops, from the lowest address: the
  // control words (the starting thread's), r15 r14 r13 r12 rbx rbp, the
  // address it returns to (the trampoline), and a null return address for
  // the trampoline, which never returns; on entry the stack pointer is
  // 8 mod 16, as after a call. The stack's top is page-aligned.
  uint32_t mxcsr = 0;
  uint16_t fpcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  auto* sp = reinterpret_cast<uint64_t*>(stack_ + stack_bytes_);
  *--sp = 0;
  *--sp = reinterpret_cast<uint64_t>(&Fiber::Trampoline);
  for (int r = 0; r < 6; ++r) *--sp = 0;
  *--sp = mxcsr | static_cast<uint64_t>(fpcw) << 32;
  sp_ = sp;
#else
  if (getcontext(&context_) != 0) Die("cuda emulation: getcontext");
  context_.uc_stack.ss_sp = stack_;
  context_.uc_stack.ss_size = stack_bytes_;
  context_.uc_link = nullptr;
  makecontext(&context_, &Fiber::Trampoline, 0);
#endif
  entry_ = entry;
  arg_ = arg;
  finished_ = false;
}

void Fiber::Resume() {
  resuming.running = this;
  StartSwitch(&resuming.fake_stack, stack_, stack_bytes_);
#ifdef TRAINYARD_EMULATION_STACK_SWITCH
  TrainyardEmulationSwitch(&resuming.sp, sp_);
#else
  swapcontext(&resuming.context, &context_);
#endif
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
#ifdef TRAINYARD_EMULATION_STACK_SWITCH
  TrainyardEmulationSwitch(&sp_, resuming.sp);
#else
  swapcontext(&context_, &resuming.context);
#endif
  FinishSwitch(fake_stack_, &resuming.stack_bottom, &resuming.stack_size);
}

}  // namespace trainyard::cuda_emulation
