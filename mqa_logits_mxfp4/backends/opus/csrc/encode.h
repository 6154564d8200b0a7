// Exact E2M1 -> MMA operand encodings (integer code only, host and device: the CPU tests check
// every code against torch's float8_e4m3fn / float16 views).
//
// A block partial is the product of a key operand and a query operand; each side carries a
// power of two that the other cancels, so the MMA's fp32 partial is the exact E2M1 dot product.
//   fp8 (E4M3): key = value * 2^-6 (E2M1 bits placed in E4M3 fields; code 1 is a subnormal),
//               query = value * 2^6 (all normal, at most 384)
//   f16 (FP16): key = value * 2^-13 (all normal: bit placement then exponent + 1),
//               query = value * 2^13 (at most 49152)
// Words hold 8 codes (element 2i in the low nibble of byte i). Within a scale block the K order
// is free (the partial is exact in any order), so each side only has to split a word the same
// way: fp8 -> (even elements, odd elements) as 4 bytes each; f16 -> 4 half pairs
// (n_i, n_{i+4}) for i = 0..3.
#pragma once

#include <stdint.h>

#include "hd.h"

namespace opus {

OPUS_HD uint32_t min_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vminu2(a, b);
#else
  const uint32_t lo = (a & 0xFFFFu) < (b & 0xFFFFu) ? (a & 0xFFFFu) : (b & 0xFFFFu);
  const uint32_t hi = (a >> 16) < (b >> 16) ? (a >> 16) : (b >> 16);
  return lo | (hi << 16);
#endif
}

// ---- fp8 (E4M3)

OPUS_HD uint32_t e4m3_query_code(uint32_t c) {  // value * 2^6
  const uint32_t m = c & 7u;
  const uint32_t v = m == 0u ? 0u : (m == 1u ? 0x60u : 0x60u + (m << 2));
  return v | ((c & 8u) << 4);
}
OPUS_HD void e4m3_query_word(uint32_t x, uint32_t (&out)[2]) {
  out[0] = 0u;
  out[1] = 0u;
  for (int j = 0; j < 4; ++j) {
    out[0] |= e4m3_query_code((x >> (8 * j)) & 0xFu) << (8 * j);
    out[1] |= e4m3_query_code((x >> (8 * j + 4)) & 0xFu) << (8 * j);
  }
}
OPUS_HD void e4m3_key_word(uint32_t x, uint32_t (&out)[2]) {  // value * 2^-6
  out[0] = ((x << 2) & 0x1C1C1C1Cu) | ((x << 4) & 0x80808080u);  // even elements
  out[1] = ((x >> 2) & 0x1C1C1C1Cu) | (x & 0x80808080u);         // odd elements
}

// ---- f16 (FP16)

OPUS_HD uint32_t f16_query_code(uint32_t c) {  // value * 2^13
  const uint32_t m = c & 7u;
  const uint32_t v = m == 0u ? 0u : (m == 1u ? (27u << 10) : (((m >> 1) + 27u) << 10) | ((m & 1u) << 9));
  return v | ((c & 8u) << 12);
}
OPUS_HD void f16_query_word(uint32_t x, uint32_t (&out)[4]) {
  for (int i = 0; i < 4; ++i)
    out[i] = f16_query_code((x >> (4 * i)) & 0xFu) | (f16_query_code((x >> (4 * i + 16)) & 0xFu) << 16);
}
// value * 2^-13: magnitude bits at 9..11 (value * 2^-14, code 1 a subnormal), then + min(m, 2^10)
// lifts every nonzero code by one binade (code 1 onto the smallest normal); sign to bit 15.
template <int I>
OPUS_HD uint32_t f16_key_pair(uint32_t x) {
  constexpr int kMag = 9 - 4 * I, kSign = 12 - 4 * I;
  const uint32_t m = (kMag >= 0 ? (x << (kMag >= 0 ? kMag : 0)) : (x >> (kMag < 0 ? -kMag : 0))) & 0x0E000E00u;
  return (m + min_u16x2(m, 0x04000400u)) | ((x << kSign) & 0x80008000u);
}
OPUS_HD void f16_key_word(uint32_t x, uint32_t (&out)[4]) {
  out[0] = f16_key_pair<0>(x);
  out[1] = f16_key_pair<1>(x);
  out[2] = f16_key_pair<2>(x);
  out[3] = f16_key_pair<3>(x);
}

}  // namespace opus
