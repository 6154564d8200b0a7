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
//
// The fast path's keys (block shifts 0..2, |x| <= 48) take a cheaper form: the unsigned byte
// kI8KeyBias + x, always below 128, so a permute whose selector nibble has its sign bit set
// yields 0 (the byte's sign replicated). One permute on the code gives the byte of every
// non-negative code and 0 for the rest, one on the code's complement (a table in reverse
// order) the byte of every negative code and 0 for the rest, and an add joins them (the bytes
// are disjoint): two permutes and an add per four elements instead of three permutes and the
// selector's masks.
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

// The biased key tables for shift d (0..2; 3 exceeds a byte's low 7 bits and only serves keys
// nothing reads): bytes 0..7 of {pos_lo, pos_hi} are kI8KeyBias + 2 * |E2M1(m)| * 2^d for code
// m, byte i of {neg_lo, neg_hi} is kI8KeyBias - 2 * |E2M1(7 - i)| * 2^d (indexed by the
// complement of a negative code's magnitude).
constexpr uint32_t kI8KeyBias = 64;
OPUS_HD constexpr uint32_t i8_key_pack(int m0, int d, bool neg) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = neg ? kI8KeyBias - (i8_mag(7 - (m0 + i)) << d) : kI8KeyBias + (i8_mag(m0 + i) << d);
    w |= (v & 0xFFu) << (8 * i);
  }
  return w;
}
OPUS_HD constexpr I8Table i8_key_table(int d) {
  return I8Table{i8_key_pack(0, d, false), i8_key_pack(4, d, false), i8_key_pack(0, d, true), i8_key_pack(4, d, true)};
}

// 8 codes -> 8 biased key bytes kI8KeyBias + 2 * value * 2^d, laid out as i8_word's. On sm_90
// the permutes run on the ALU pipe, which this conversion saturates, so the other instructions
// go to the FMA pipe as integer multiply-adds: the complements as x * ones + ones (= ~x for ones
// = ~0u, which the caller passes from memory: a constant ptxas could see would fold it back into
// a LOP3) and the joins as adds (the two lookups' bytes are disjoint). 5 ALU + 4 IMAD a word,
// where ~x, shifts and ORs were 9 ALU (docs/perf-notes.md, 2026-12-02, second session).
OPUS_HD void i8_key_word(uint32_t x, const I8Table& t, uint32_t ones, uint32_t& lo, uint32_t& hi) {
  const uint32_t xh = x >> 16;
  // a negative code's magnitude bits complemented, its sign bit clear (only the low 16 bits select)
  const uint32_t xn = x * ones + ones, xnh = xh * ones + ones;
  lo = prmt(t.pos_lo, t.pos_hi, x) + prmt(t.neg_lo, t.neg_hi, xn);
  hi = prmt(t.pos_lo, t.pos_hi, xh) + prmt(t.neg_lo, t.neg_hi, xnh);
}

// The bias's correction. A fast-path dot product over biased key bytes counts kI8KeyBias times
// the column's operand sum too; a fifth k-slice takes it back: the key operand there is the
// constant i8_bias_key (slot 0 holds 1, the other 31 slots 255), and the column's 32 signed
// bytes b_p (slot p, word p / 4, byte p % 4) satisfy sum_p a_p * b_p = -kI8KeyBias * qsum. For
// |qsum| <= 128 * 96: |b_0| <= 127, and the other slots carry at most 3084 < 31 * 127.
OPUS_HD constexpr uint32_t i8_bias_key(int slot) { return slot == 0 ? 1u : 255u; }
// Slot 0 takes want - 255 q; slots 1, 2, ... take q's magnitude 127 at a time (slot p:
// min(max(|q| - 127 (p - 1), 0), 127), with q's sign): each slot from q alone, no chain through
// the slots. Kernels whose groups span more than one 64-column chunk have the 16 lanes of a
// column write two slots each (i8_bias_pair), so the code on the way to the first stage stays
// short; i8_bias_slice is the whole slice at once (one-chunk kernels, the probes, the host check).
struct I8BiasQuot {
  int want, q;
};
OPUS_HD I8BiasQuot i8_bias_quot(int qsum) {
  const int want = -int(kI8KeyBias) * qsum;
  return I8BiasQuot{want, want >= 0 ? (want + 127) / 255 : -((127 - want) / 255)};  // nearest: |want - 255 q| <= 127
}
OPUS_HD int i8_bias_slot(const I8BiasQuot& bq, int p) {
  const int m = (bq.q < 0 ? -bq.q : bq.q) - 127 * (p - 1);
  const int v = m < 0 ? 0 : m > 127 ? 127 : m;
  return p == 0 ? bq.want - 255 * bq.q : bq.q < 0 ? -v : v;  // selects, no branch: the set-up's column sums run it
}
// Slots 2k and 2k + 1 as the two bytes of a 16-bit word (slot 2k low).
OPUS_HD uint32_t i8_bias_pair(const I8BiasQuot& bq, int k) {
  return (uint32_t(i8_bias_slot(bq, 2 * k)) & 0xFFu) | (uint32_t(i8_bias_slot(bq, 2 * k + 1)) & 0xFFu) << 8;
}
OPUS_HD void i8_bias_slice(int qsum, uint32_t (&w)[8]) {
  const I8BiasQuot bq = i8_bias_quot(qsum);
  for (int i = 0; i < 8; ++i) {
    w[i] = 0u;
    for (int b = 0; b < 4; ++b) w[i] |= (uint32_t(i8_bias_slot(bq, 4 * i + b)) & 0xFFu) << (8 * b);
  }
}

}  // namespace opus
