// Compile-only probe of what each way of taking an exponential costs in
// sm_90 machine code: five kernels, each summing 64 values loaded from
// memory (so the compiler cannot bound them) after one form of exp.
// Counted, not run: scripts/kernel-instructions.sh bench/engine/exp_forms.cu
// (docs/BENCHMARKS.md has the counts). The difference from `none` over 64
// is the form's instructions per exponential.
#define EXP_FORM_KERNEL(name, form)                  \
  __global__ void name(float* x) {                   \
    float acc = 0.f;                                 \
    _Pragma("unroll") for (int i = 0; i < 64; ++i) { \
      const float v = x[threadIdx.x + 64 * i];       \
      float r;                                       \
      form;                                          \
      acc += r;                                      \
    }                                                \
    x[threadIdx.x] = acc;                            \
  }

EXP_FORM_KERNEL(ExpFormNone, r = v)
EXP_FORM_KERNEL(ExpFormEx2Ftz, asm("ex2.approx.ftz.f32 %0, %1;"
                                   : "=f"(r)
                                   : "f"(v)))
EXP_FORM_KERNEL(ExpFormEx2, asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(v)))
EXP_FORM_KERNEL(ExpFormExp2f, r = exp2f(v))
EXP_FORM_KERNEL(ExpFormExpf, r = expf(v))
