// sm_90a PTX the Hopper bodies use, one thin wrapper each: mbarriers, bulk copies and cp.async
// into a barrier, named barriers, register reallocation, and integer wgmma with A in registers.
// Device code only; compiled for sm_90a (jit.py), where `wgmma` and `setmaxnreg` exist.
#pragma once

#include <stdint.h>
#ifdef OPUS_MBAR_WATCHDOG
#include <cstdio>
#endif

#include "port.h"

namespace opus {
namespace sm90 {

OPUS_DEV uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// ---- mbarriers (one 8-byte word each, in shared memory)

OPUS_DEV void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
OPUS_DEV void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Blocks until the phase of parity `parity` has completed (a fresh barrier counts parity 1 as
// completed, so a producer's first wait on an empty slot passes).
// With OPUS_MBAR_WATCHDOG defined (debugging a hang; off in every build here), a wait that
// spins 2^22 times prints its block, thread and barrier address and traps.
OPUS_DEV void mbar_wait(uint64_t* bar, uint32_t parity) {
#ifdef OPUS_MBAR_WATCHDOG
  for (long long spin = 0;; ++spin) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    if (done) return;
    if (spin == (1ll << 22)) {
      printf("mbar_wait stuck: block (%d,%d) thread %d barrier smem 0x%x parity %u\n", blockIdx.x, blockIdx.y,
             threadIdx.x, smem_addr(bar), parity);
      __trap();
    }
  }
#endif
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// mbar_wait for a warp that has nothing else to do meanwhile (a producer waiting for an empty
// slot): a failed try sleeps ~128 ns before the next, so the waiting warp leaves the issue slots
// of its scheduler to the consumer warps there. try_wait's own time limit is short (the i8
// producer tried ~58 times a stage where the consumers set the pace) and ptxas drops a
// suspend-time hint on sm_90 (docs/perf-notes.md, fortieth session).
OPUS_DEV void mbar_wait_sleep(uint64_t* bar, uint32_t parity) {
#ifdef OPUS_MBAR_WATCHDOG
  mbar_wait(bar, parity);
#else
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@done bra end_%=;\n"
      "nanosleep.u32 128;\n"
      "bra wait_%=;\n"
      "end_%=:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}
// The barrier's arrival of this thread fires once all its earlier cp.async copies have landed
// (.noinc: the arrival is one of the barrier's expected count).
OPUS_DEV void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// The same counted apart from the thread's own arrival (the barrier's pending count goes up by one
// until the copies land), for a thread that also arrives itself, releasing its plain stores.
OPUS_DEV void cp_async_arrive_counted(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// The barrier's current phase also waits for `bytes` more bytes of bulk copies (complete_tx).
OPUS_DEV void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// ---- bulk copies (the TMA unit, global -> shared): `bytes` a multiple of 16, both addresses
// 16-byte aligned; the bytes count against the barrier's phase when they land.
OPUS_DEV void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// ---- cp.async (global -> shared, through L2)

// 16 bytes; `bytes` 0 writes zeros and reads nothing (keys that must not be read).
OPUS_DEV void cp_async16(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes) : "memory");
}
OPUS_DEV void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// ---- named barriers among a subset of warps (id 0 is __syncthreads)

OPUS_DEV void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives without waiting: the barrier completes when `threads` have arrived or synced on it.
OPUS_DEV void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Every participating thread gets the AND of `pred` over all of them.
OPUS_DEV bool bar_and(int id, int threads, bool pred) {
  uint32_t out;
  asm volatile(
      "{\n"
      ".reg .pred in, res;\n"
      "setp.ne.u32 in, %1, 0;\n"
      "bar.red.and.pred res, %2, %3, in;\n"
      "selp.u32 %0, 1, 0, res;\n"
      "}\n"
      : "=r"(out)
      : "r"(uint32_t(pred)), "r"(id), "r"(threads)
      : "memory");
  return out != 0;
}

// ---- register reallocation between warpgroups (the kernel must have a register cap at entry)

template <int REGS>
OPUS_DEV void regs_shrink() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS)); }
template <int REGS>
OPUS_DEV void regs_grow() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS)); }

// ---- wgmma

OPUS_DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
OPUS_DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
OPUS_DEV void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Shared memory written by ordinary stores, read next by wgmma (the async proxy).
OPUS_DEV void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma wait.
template <class T>
OPUS_DEV void pin(T& r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared-memory matrix descriptor of a K-major operand without swizzle: 8-row x 16-byte core
// matrices, `k_step` bytes between cores adjacent in K, `mn_step` between cores adjacent in M/N.
// smem_desc_at: the same from the operand's address in the CTA's shared window (`addr`), for
// operands whose address is a compile-time constant.
OPUS_HD constexpr uint64_t smem_desc_at(uint32_t addr, uint32_t k_step, uint32_t mn_step) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t((k_step >> 4) & 0x3FFFu) << 16) |
         (uint64_t((mn_step >> 4) & 0x3FFFu) << 32);
}
OPUS_DEV uint64_t smem_desc(const void* base, uint32_t k_step, uint32_t mn_step) {
  return smem_desc_at(smem_addr(base), k_step, mn_step);
}

#define OPUS_R4(d, i) "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3])
#define OPUS_R8(d, i) OPUS_R4(d, i), OPUS_R4(d, i + 4)
#define OPUS_R16(d, i) OPUS_R8(d, i), OPUS_R8(d, i + 8)
#define OPUS_R32(d, i) OPUS_R16(d, i), OPUS_R16(d, i + 16)
#define OPUS_W4(d, i) "=r"(d[i]), "=r"(d[i + 1]), "=r"(d[i + 2]), "=r"(d[i + 3])
#define OPUS_W8(d, i) OPUS_W4(d, i), OPUS_W4(d, i + 4)
#define OPUS_W16(d, i) OPUS_W8(d, i), OPUS_W8(d, i + 8)
#define OPUS_W32(d, i) OPUS_W16(d, i), OPUS_W16(d, i + 16)

// D (s32, 64 x N over the warpgroup) (+)= A (64 x 32, registers) x B (s8, 32 x N, shared); A is
// s8, or u8 when KEY_U8. `acc` false starts from zero. Per thread: N/2 accumulators, 4 A registers.
// start(): D = A x B, D's earlier values not an input (write-only operands: the registers of a
// retired accumulator are free until the chain that reuses them starts).
#define OPUS_IGMMA(SHAPE, ATYPE, DREGS, AREGS, DESC, PRED, ...)                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, " PRED ", 0;\n"                                   \
               "wgmma.mma_async.sync.aligned." SHAPE ".s32." ATYPE ".s8 " DREGS ", " AREGS ", " DESC \
               ", p;\n}\n"                                                                         \
               : __VA_ARGS__                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(uint32_t(acc)))
#define OPUS_IGMMA0(SHAPE, ATYPE, DREGS, AREGS, DESC, ...)                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, 0, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned." SHAPE ".s32." ATYPE ".s8 " DREGS ", " AREGS ", " DESC \
               ", p;\n}\n"                                                                         \
               : __VA_ARGS__                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
// Both operands from shared memory (A's descriptor too), accumulating into D.
#define OPUS_IGMMA_SS(SHAPE, ATYPE, DREGS, ADESC, BDESC, ...)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, 1, 0;\n"                                          \
               "wgmma.mma_async.sync.aligned." SHAPE ".s32." ATYPE ".s8 " DREGS ", " ADESC ", " BDESC \
               ", p;\n}\n"                                                                         \
               : __VA_ARGS__                                                                       \
               : "l"(a), "l"(b))
#define OPUS_IGMMA_BOTH(SHAPE, DREGS, AREGS, DESC, PRED, ...)        \
  if constexpr (KEY_U8)                                              \
    OPUS_IGMMA(SHAPE, "u8", DREGS, AREGS, DESC, PRED, __VA_ARGS__);  \
  else                                                               \
    OPUS_IGMMA(SHAPE, "s8", DREGS, AREGS, DESC, PRED, __VA_ARGS__)
#define OPUS_IGMMA0_BOTH(SHAPE, DREGS, AREGS, DESC, ...)         \
  if constexpr (KEY_U8)                                          \
    OPUS_IGMMA0(SHAPE, "u8", DREGS, AREGS, DESC, __VA_ARGS__);   \
  else                                                           \
    OPUS_IGMMA0(SHAPE, "s8", DREGS, AREGS, DESC, __VA_ARGS__)

template <int N, bool KEY_U8 = false>
struct WgmmaI8;

template <bool KEY_U8>
struct WgmmaI8<16, KEY_U8> {
  static OPUS_DEV void run(int32_t (&d)[8], const uint32_t (&a)[4], uint64_t b, bool acc) {
    OPUS_IGMMA_BOTH("m64n16k32", "{%0, %1, %2, %3, %4, %5, %6, %7}", "{%8, %9, %10, %11}", "%12", "%13",
                    OPUS_R8(d, 0));
  }
  static OPUS_DEV void start(int32_t (&d)[8], const uint32_t (&a)[4], uint64_t b) {
    OPUS_IGMMA0_BOTH("m64n16k32", "{%0, %1, %2, %3, %4, %5, %6, %7}", "{%8, %9, %10, %11}", "%12", OPUS_W8(d, 0));
  }
};

template <bool KEY_U8>
struct WgmmaI8<32, KEY_U8> {
  static OPUS_DEV void run(int32_t (&d)[16], const uint32_t (&a)[4], uint64_t b, bool acc) {
    OPUS_IGMMA_BOTH("m64n32k32", "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}",
                    "{%16, %17, %18, %19}", "%20", "%21", OPUS_R16(d, 0));
  }
  static OPUS_DEV void start(int32_t (&d)[16], const uint32_t (&a)[4], uint64_t b) {
    OPUS_IGMMA0_BOTH("m64n32k32", "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}",
                     "{%16, %17, %18, %19}", "%20", OPUS_W16(d, 0));
  }
};

template <bool KEY_U8>
struct WgmmaI8<64, KEY_U8> {
  static OPUS_DEV void run(int32_t (&d)[32], const uint32_t (&a)[4], uint64_t b, bool acc) {
    OPUS_IGMMA_BOTH("m64n64k32",
                    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}",
                    "{%32, %33, %34, %35}", "%36", "%37", OPUS_R32(d, 0));
  }
  static OPUS_DEV void start(int32_t (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    OPUS_IGMMA0_BOTH("m64n64k32",
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}",
                     "{%32, %33, %34, %35}", "%36", OPUS_W32(d, 0));
  }
  // D += A x B with A (64 x 32) from shared memory too: descriptor `a`.
  static OPUS_DEV void run_ss(int32_t (&d)[32], uint64_t a, uint64_t b) {
#define OPUS_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
    if constexpr (KEY_U8)
      OPUS_IGMMA_SS("m64n64k32", "u8", OPUS_D32, "%32", "%33", OPUS_R32(d, 0));
    else
      OPUS_IGMMA_SS("m64n64k32", "s8", OPUS_D32, "%32", "%33", OPUS_R32(d, 0));
#undef OPUS_D32
  }
};

#undef OPUS_IGMMA0_BOTH
#undef OPUS_IGMMA_SS
#undef OPUS_IGMMA_BOTH
#undef OPUS_IGMMA0
#undef OPUS_IGMMA
#undef OPUS_R4
#undef OPUS_R8
#undef OPUS_R16
#undef OPUS_R32
#undef OPUS_W4
#undef OPUS_W8
#undef OPUS_W16
#undef OPUS_W32

}  // namespace sm90
}  // namespace opus
