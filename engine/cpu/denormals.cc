#include "engine/cpu/denormals.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace trainyard::engine {
namespace {

#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFlushToZero = 0x8000;       // MXCSR.FTZ
constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR.DAZ
#elif defined(__aarch64__)
constexpr uint64_t kFpcrFlushToZero = uint64_t{1} << 24;  // FPCR.FZ
#endif

}  // namespace

void FlushDenormalsOnThisThread() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
#elif defined(__aarch64__)
  uint64_t fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  asm volatile("msr fpcr, %0" : : "r"(fpcr | kFpcrFlushToZero));
#endif
}

bool DenormalsFlushedOnThisThread() {
#if defined(__x86_64__) || defined(__i386__)
  const unsigned both = kFlushToZero | kDenormalsAreZero;
  return (_mm_getcsr() & both) == both;
#elif defined(__aarch64__)
  uint64_t fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return (fpcr & kFpcrFlushToZero) != 0;
#else
  return false;
#endif
}

}  // namespace trainyard::engine
