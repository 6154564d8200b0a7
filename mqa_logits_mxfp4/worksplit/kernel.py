"""The Triton kernel that writes Table records (only @triton.jit code lives here).

Imported on first use, never at package import: Triton reads TRITON_INTERPRET when a kernel is
decorated. `cta_range` is also the Triton scoring kernel's Free-mode split
(backends/triton/kernels.py), so Table and Free share one unit numbering (worksplit/rules.py).
"""

import triton
import triton.language as tl

from ..core.records import RECORD_INTS as _RECORD_INTS

RECORD_INTS: tl.constexpr = tl.constexpr(_RECORD_INTS)


@triton.jit
def cta_range(qsl_ptr, re_ptr, num_seqs, pid, nprog,
              R: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_P2: tl.constexpr):
    """Program pid's unit range and its first sequence: (u_begin, u_end, b, units before b)."""
    seqs = tl.arange(0, SEQ_P2)
    smask = seqs < num_seqs
    qa = tl.load(qsl_ptr + seqs, mask=smask, other=0)
    qb = tl.load(qsl_ptr + seqs + 1, mask=smask, other=0)
    n = qb - qa
    end = tl.load(re_ptr + qb - 1, mask=smask & (n > 0), other=0)
    units = tl.cdiv(n, R) * tl.cdiv(end, BLOCK_N)
    total = tl.sum(units, axis=0).to(tl.int64)
    u_begin = ((pid * total) // nprog).to(tl.int32)
    u_end = (((pid + 1) * total) // nprog).to(tl.int32)
    cum = tl.cumsum(units, axis=0)
    before = cum <= u_begin
    b = tl.sum(before.to(tl.int32), axis=0)
    base = tl.sum(tl.where(before, units, 0), axis=0)
    return u_begin, u_end, b, base


@triton.jit
def build_schedule_kernel(qsl_ptr, re_ptr, sched_ptr, num_seqs,
                          R: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_P2: tl.constexpr):
    """Table mode: one 32-byte record per program of the scoring launch."""
    pid = tl.program_id(0)
    u_begin, u_end, b, base = cta_range(qsl_ptr, re_ptr, num_seqs, pid, tl.num_programs(0),
                                        R, BLOCK_N, SEQ_P2)
    rec = sched_ptr + pid * RECORD_INTS
    tl.store(rec + 0, u_begin)
    tl.store(rec + 1, u_end)
    tl.store(rec + 2, b)
    tl.store(rec + 3, base)
