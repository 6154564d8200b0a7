// Division of a non-negative int (< 2^31) by a divisor fixed at launch, without a divide
// instruction sequence: q = (umulhi(n, magic) + n) >> shift (round-up method; the host sets
// magic and shift once a launch; tests/opus_host_check.cpp checks it against `/`).
#pragma once

#include <stdint.h>

#include "hd.h"

namespace opus {

struct FastDiv {
  uint32_t magic;
  uint32_t shift;
  int32_t divisor;
};

OPUS_HD FastDiv make_fastdiv(int32_t d) {  // d >= 1 (host, or once a thread)
  uint32_t l = 0;
  while ((1ull << l) < (uint64_t)d) ++l;
  const uint64_t magic = ((1ull << 32) * ((1ull << l) - (uint64_t)d)) / (uint64_t)d + 1;
  return FastDiv{(uint32_t)magic, l, d};
}

OPUS_HD uint32_t umulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __umulhi(a, b);
#else
  return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

OPUS_HD int fast_div(int n, const FastDiv& f) {  // 0 <= n < 2^31
  return (int)((umulhi32((uint32_t)n, f.magic) + (uint32_t)n) >> f.shift);
}

}  // namespace opus
