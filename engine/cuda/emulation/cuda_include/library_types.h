// Shim: the CUDA emulation's stand-in for CUDA's library_types.h, the data
// type tags the CUDA libraries (cuBLAS, cuBLASLt) take, with CUDA's
// numeric values. On the include path of emulation targets only, ahead of
// any real CUDA include directory.
// Every enum here has int as its fixed underlying type, where the real
// header leaves it to the compiler: any int is then a value of the type,
// so a caller's wrong value (a test passes 7 as an operation) reaches the
// stand-in's check defined, rather than as undefined behaviour.
#ifndef TRAINYARD_EMULATION_SHIM_LIBRARY_TYPES_H_
#define TRAINYARD_EMULATION_SHIM_LIBRARY_TYPES_H_

#if defined(__LIBRARY_TYPES_H__)
#error "the real library_types.h is included beside the CUDA emulation's"
#endif

typedef enum cudaDataType_t : int {
  CUDA_R_16F = 2,
  CUDA_C_16F = 6,
  CUDA_R_16BF = 14,
  CUDA_C_16BF = 15,
  CUDA_R_32F = 0,
  CUDA_C_32F = 4,
  CUDA_R_64F = 1,
  CUDA_C_64F = 5,
  CUDA_R_8I = 3,
  CUDA_C_8I = 7,
  CUDA_R_8U = 8,
  CUDA_C_8U = 9,
  CUDA_R_32I = 10,
  CUDA_C_32I = 11,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
} cudaDataType;

#endif  // TRAINYARD_EMULATION_SHIM_LIBRARY_TYPES_H_
