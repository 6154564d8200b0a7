// E2M1 -> INT8 operands of the integer tensor-core body (kernel_sm90_i8.cuh). Host and device:
// the CPU tests check every code and shift against the E2M1 values (tests/opus_host_check.cpp).
//
// Twice an E2M1 value is an integer in {0, +-1, +-2, +-3, +-4, +-6, +-8, +-12}; shifted left by a
// block's scale offset d in 0..3 it stays within int8 (|x| <= 96), and a 128-term dot product of
// two such operands stays below 2^21: exact in int32 and in fp32.
//
// A word holds 8 codes (element i in bits 4i..4i+3). Each code is looked up twice with one
// byte-permute each (`prmt`: 3 bits of magnitude pick one of 8 bytes): in a table of the
// non-negative values and in a table of their negations; a third permute picks, per element,
// the one its sign bit names. Output: `lo` holds elements 0..3, `hi` elements 4..7, one byte each.
#pragma once

#include <stdint.h>

#include "hd.h"

namespace opus {

// The four lookup words for shift d: bytes 0..7 of {pos_lo, pos_hi} are 2 * |E2M1(m)| * 2^d for
// magnitude code m, bytes of {neg_lo, neg_hi} their negations (two's complement).
struct alignas(16) I8Table {
  uint32_t pos_lo, pos_hi, neg_lo, neg_hi;
};

OPUS_HD constexpr uint32_t i8_mag(int m) { return m < 5 ? uint32_t(m) : uint32_t(m == 5 ? 6 : m == 6 ? 8 : 12); }
OPUS_HD constexpr uint32_t i8_pack(int m0, int d, bool neg) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = i8_mag(m0 + i) << d;
    w |= ((neg ? (0u - v) : v) & 0xFFu) << (8 * i);
  }
  return w;
}
OPUS_HD constexpr I8Table i8_table(int d) {
  return I8Table{i8_pack(0, d, false), i8_pack(4, d, false), i8_pack(0, d, true), i8_pack(4, d, true)};
}

// prmt.b32 in its default mode: selector nibble i picks byte (nibble & 7) of {b, a} (a is bytes
// 0..3) into byte i, or that byte's sign bit replicated when nibble bit 3 is set.
OPUS_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
#else
  const uint64_t src = (uint64_t(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = (sel >> (4 * i)) & 0xFu;
    uint32_t byte = uint32_t(src >> (8 * (s & 7u))) & 0xFFu;
    if (s & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    r |= byte << (8 * i);
  }
  return r;
#endif
}

// 8 codes -> 8 int8 (2 * value * 2^d, d the table's shift): lo = elements 0..3, hi = 4..7.
OPUS_HD void i8_word(uint32_t x, const I8Table& t, uint32_t& lo, uint32_t& hi) {
  const uint32_t mag = x & 0x77777777u;
  const uint32_t sel = ((x >> 1) & 0x44444444u) | 0x32103210u;  // byte i of pos, or of neg (sign)
  lo = prmt(prmt(t.pos_lo, t.pos_hi, mag), prmt(t.neg_lo, t.neg_hi, mag), sel);
  hi = prmt(prmt(t.pos_lo, t.pos_hi, mag >> 16), prmt(t.neg_lo, t.neg_hi, mag >> 16), sel >> 16);
}

}  // namespace opus
