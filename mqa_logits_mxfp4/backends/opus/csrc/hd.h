// OPUS_HD: a function compiled for host and device by nvcc/clang-HIP, and as plain inline C++
// by a host compiler (the CPU tests build worksplit.h / checks.h / registry.h with g++ alone).
#pragma once

#if defined(__HIPCC__)
  #include <hip/hip_runtime.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
  #define OPUS_HD __host__ __device__ __forceinline__
  #define OPUS_DEV __device__ __forceinline__
#else
  #define OPUS_HD inline
#endif
