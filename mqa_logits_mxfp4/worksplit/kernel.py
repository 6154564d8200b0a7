"""The Triton kernel that writes Table records (only @triton.jit code lives here).

Imported on first use, never at package import: Triton reads TRITON_INTERPRET when a kernel is
decorated. `cta_range` is also the Triton scoring kernel's Free-mode split
(backends/triton/kernels.py), so Table and Free share one unit numbering (worksplit/rules.py).
`seq_start`, `row_end` and `row_start` are the guarded reads of the row tensors both kernels make
(worksplit/rules.py's functions of the same names): whatever the data, no row past `num_rows`
and no key past `seq_cap` is ever named, and a window start lies in [0, its end].
"""

import triton
import triton.language as tl

from ..core.records import RECORD_INTS as _RECORD_INTS
from .rules import PIECE_COST as _PIECE_COST

RECORD_INTS: tl.constexpr = tl.constexpr(_RECORD_INTS)
PIECE_COST: tl.constexpr = tl.constexpr(_PIECE_COST)


@triton.jit
def seq_start(qsl_ptr, b, num_rows, mask):
    """query_start_loc[b] clamped into [0, num_rows] (`mask`: None, or off past the sequences)."""
    if mask is None:
        v = tl.load(qsl_ptr + b)
    else:
        v = tl.load(qsl_ptr + b, mask=mask, other=0)
    return tl.minimum(tl.maximum(v, 0), num_rows)


@triton.jit
def row_end(re_ptr, r, seq_cap, mask):
    """row_ends[r] clamped into [0, seq_cap] (0 where `mask` is off)."""
    return tl.minimum(tl.maximum(tl.load(re_ptr + r, mask=mask, other=0), 0), seq_cap)


@triton.jit
def row_start(rs_ptr, r, end, mask, HAS_STARTS: tl.constexpr):
    """row_starts[r] clamped into [0, end] (0 without row_starts, or where `mask` is off)."""
    if HAS_STARTS:
        return tl.minimum(tl.maximum(tl.load(rs_ptr + r, mask=mask, other=0), 0), end)
    else:
        return tl.zeros_like(end)


@triton.jit
def seq_tiles(rs_ptr, first_row, end, mask, BLOCK_N: tl.constexpr, HAS_STARTS: tl.constexpr):
    """(lo, span): the key tiles [lo, lo + span) of a window from the row_start of `first_row`
    to `end` (worksplit/rules.py's seq_units and prefill_work)."""
    lo = row_start(rs_ptr, first_row, end, mask, HAS_STARTS) // BLOCK_N
    return lo, tl.cdiv(end, BLOCK_N) - lo


@triton.jit
def group_units(span):
    """A group's units: PIECE_COST for its set-up, then one a key tile; none without a tile
    (worksplit/rules.py's group_units)."""
    return tl.where(span > 0, PIECE_COST + span, 0)


@triton.jit
def seq_bounds(qsl_ptr, re_ptr, rs_ptr, seqs, num_seqs, num_rows, seq_cap,
               BLOCK_N: tl.constexpr, HAS_STARTS: tl.constexpr):
    """(qa, qb, lo, span) of the sequences `seqs` (worksplit/rules.py's seq_units: rows [qa, qb),
    key tiles [lo, lo + span)); zeros past num_seqs."""
    smask = seqs < num_seqs
    qa = seq_start(qsl_ptr, seqs, num_rows, smask)
    qb = tl.maximum(seq_start(qsl_ptr, seqs + 1, num_rows, smask), qa)
    end = row_end(re_ptr, qb - 1, seq_cap, smask & (qb > qa))
    lo, span = seq_tiles(rs_ptr, qa, end, smask & (qb > qa), BLOCK_N, HAS_STARTS)
    return qa, qb, lo, span


@triton.jit
def split_units(units, pid, nprog):
    """Program pid's share of nprog of the sequences' `units`: (u_begin, u_end, b, units before b)."""
    total = tl.sum(units, axis=0).to(tl.int64)
    u_begin = ((pid * total) // nprog).to(tl.int32)
    u_end = (((pid + 1) * total) // nprog).to(tl.int32)
    b, base = first_seq(units, u_begin)
    return u_begin, u_end, b, base


@triton.jit
def first_seq(units, u):
    """(b, units before b): the sequence holding unit u (worksplit/rules.py's first_seq)."""
    before = tl.cumsum(units, axis=0) <= u
    return tl.sum(before.to(tl.int32), axis=0), tl.sum(tl.where(before, units, 0), axis=0)


@triton.jit
def cta_range(qsl_ptr, re_ptr, rs_ptr, num_seqs, num_rows, seq_cap, pid, nprog,
              R: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_P2: tl.constexpr, HAS_STARTS: tl.constexpr):
    """Program pid's unit range and its first sequence: (u_begin, u_end, b, units before b)."""
    seqs = tl.arange(0, SEQ_P2)
    qa, qb, lo, span = seq_bounds(qsl_ptr, re_ptr, rs_ptr, seqs, num_seqs, num_rows, seq_cap, BLOCK_N, HAS_STARTS)
    return split_units(tl.cdiv(qb - qa, R) * group_units(span), pid, nprog)


@triton.jit
def table_point(x, ccum, cost, ucum, units, lo, span, setup, grain, STAGE: tl.constexpr):
    """The unit at cost point x of a Table split (table_units' sums: each sequence's cost, the
    costs and units before it)."""
    stride = PIECE_COST + span
    hit = (ccum <= x) & (x < ccum + cost)  # the one sequence x falls in (none: x is the total)
    off = tl.where(hit, x - ccum, 0).to(tl.int32)
    j = off // (setup + span)
    o = off - j * (setup + span) - setup  # tiles into group j (<= 0: inside its set-up)
    gstart = ucum + j * stride
    origin = lo - lo % STAGE
    rel = tl.minimum(tl.maximum((lo + o - origin + grain // 2) // grain * grain + origin - lo, 0), span)
    u = tl.where(o <= 0, gstart + tl.minimum(off - j * (setup + span), PIECE_COST), gstart + PIECE_COST + rel)
    return tl.where(tl.sum(hit.to(tl.int32), axis=0) > 0, tl.sum(tl.where(hit, u, 0), axis=0),
                    tl.sum(units, axis=0))


@triton.jit
def allot_point(i, before, seq_runs, runs, run, ucum, units, lo, span, STAGE: tl.constexpr):
    """Run i's first unit of an allotment (worksplit/rules.py's run_starts), from table_allot's
    sums: the runs each sequence's groups are cut into, the runs and units before it; the runs a
    group and the stages a run."""
    hit = (before <= i) & (i < before + seq_runs)  # the one sequence i falls in (none: i is past them)
    j = tl.where(hit, i - before, 0)
    group = j // tl.maximum(runs, 1)
    part = j - group * runs
    gstart = ucum + group * (PIECE_COST + span)
    u = tl.where(part == 0, gstart, gstart + PIECE_COST + lo - lo % STAGE + part * run * STAGE - lo)
    return tl.where(tl.sum(hit.to(tl.int32), axis=0) > 0, tl.sum(tl.where(hit, u, 0), axis=0),
                    tl.sum(units, axis=0))


@triton.jit
def table_allot(units, groups, lo, span, k, nprog, STAGE: tl.constexpr, ROUND: tl.constexpr, SETUP: tl.constexpr):
    """(program k's first unit, its last, whether the split allots) by worksplit/rules.py's
    allot_run and allot_unit: the programs allotted to row groups, one run of a group's stages
    each, program k starting run ceil(k x runs / nprog). With more groups than programs it cannot
    allot, and the run's search is skipped."""
    stages = tl.where(groups > 0, tl.cdiv(lo + span, STAGE) - lo // STAGE, 0)
    total = tl.sum(groups, axis=0)
    low = k * 0 + 1  # a tensor like `high`: the loop carries one type
    high = tl.where(total <= nprog, tl.maximum(tl.max(stages, axis=0), 1), 1)
    while low < high:  # the fewest stages a program for which the runs fit the programs
        mid = (low + high) // 2
        fits = tl.sum(groups * tl.cdiv(stages, mid), axis=0) <= nprog
        high = tl.where(fits, mid, high)
        low = tl.where(fits, low, mid + 1)
    run = tl.where(low > ROUND, tl.cdiv(low, ROUND) * ROUND, low)
    tiles = tl.sum(groups * span, axis=0).to(tl.int64)
    allots = (ROUND * STAGE > 1) & (total > 0) & (total <= nprog) & \
        (run.to(tl.int64) * STAGE * nprog <= tiles + SETUP * nprog)
    runs = tl.where(groups > 0, tl.cdiv(stages, run), 0)
    seq_runs = groups * runs
    before = tl.cumsum(seq_runs, axis=0) - seq_runs
    ucum = tl.cumsum(units, axis=0) - units
    nruns = tl.sum(seq_runs, axis=0).to(tl.int64)  # k x nruns: past int32 where it does not allot
    i0 = tl.cdiv(k * nruns, nprog).to(tl.int32)  # program k starts run ceil(k x runs / nprog)
    i1 = tl.cdiv((k + 1) * nruns, nprog).to(tl.int32)
    first = allot_point(i0, before, seq_runs, runs, run, ucum, units, lo, span, STAGE)
    last = allot_point(i1, before, seq_runs, runs, run, ucum, units, lo, span, STAGE)
    return first, last, allots


@triton.jit
def table_units(units, lo, span, k, nprog, STAGE: tl.constexpr, ROUND: tl.constexpr, SETUP: tl.constexpr):
    """Program k's first and last units by the split (STAGE, ROUND, SETUP) (worksplit/rules.py's
    table_unit at k and k + 1: the allotment where it applies, else the cost split), from the
    sequences' units and tiles [lo, lo + span); the sums the two ends share are computed once."""
    groups = tl.where(units > 0, units // tl.maximum(PIECE_COST + span, 1), 0)
    # fewer tiles than a round a program: ends on stages, a later set-up counted as a stage
    few = (tl.sum(groups * span, axis=0).to(tl.int64) < nprog * (STAGE * ROUND)) & (ROUND > 1)
    grain = tl.where(few, STAGE, STAGE * ROUND)
    setup = tl.where(few, min(SETUP, STAGE), SETUP)
    cost = groups * (setup + span)
    total = tl.sum(cost, axis=0).to(tl.int64)
    ccum = tl.cumsum(cost, axis=0) - cost
    ucum = tl.cumsum(units, axis=0) - units
    first = table_point((k * total) // nprog, ccum, cost, ucum, units, lo, span, setup, grain, STAGE)
    last = table_point(((k + 1) * total) // nprog, ccum, cost, ucum, units, lo, span, setup, grain, STAGE)
    first_a, last_a, allots = table_allot(units, groups, lo, span, k, nprog, STAGE, ROUND, SETUP)
    return tl.where(allots, first_a, first), tl.where(allots, last_a, last)


@triton.jit(do_not_specialize=["num_seqs", "num_rows", "seq_cap"])
def build_schedule_kernel(qsl_ptr, re_ptr, rs_ptr, sched_ptr, num_seqs, num_rows, seq_cap,
                          R: tl.constexpr, BLOCK_N: tl.constexpr, SEQ_P2: tl.constexpr,
                          HAS_STARTS: tl.constexpr, STAGE: tl.constexpr = 1, ROUND: tl.constexpr = 1,
                          SETUP: tl.constexpr = PIECE_COST):
    """Table mode: one 32-byte record per program of the scoring launch (core/records.py), its ends
    by the instance's split (STAGE, ROUND, SETUP; the defaults: the units' own split)."""
    pid = tl.program_id(0)
    seqs = tl.arange(0, SEQ_P2)
    qa, qb, lo, span = seq_bounds(qsl_ptr, re_ptr, rs_ptr, seqs, num_seqs, num_rows, seq_cap, BLOCK_N, HAS_STARTS)
    units = tl.cdiv(qb - qa, R) * group_units(span)
    if STAGE * ROUND == 1 and SETUP == PIECE_COST:  # the units' own split
        u_begin, u_end, b, base = split_units(units, pid, tl.num_programs(0))
    else:
        u_begin, u_end = table_units(units, lo, span, pid, tl.num_programs(0), STAGE, ROUND, SETUP)
        b, base = first_seq(units, u_begin)
    first = (seqs == b) & (seqs < num_seqs)  # sequence b's bounds (none past the sequences)
    rec = sched_ptr + pid * RECORD_INTS
    tl.store(rec + 0, u_begin)
    tl.store(rec + 1, u_end)
    tl.store(rec + 2, b)
    tl.store(rec + 3, base)
    tl.store(rec + 4, tl.sum(tl.where(first, qa, 0), axis=0))
    tl.store(rec + 5, tl.sum(tl.where(first, qb, 0), axis=0))
    tl.store(rec + 6, tl.sum(tl.where(first, lo, 0), axis=0))
    tl.store(rec + 7, tl.sum(tl.where(first, span, 0), axis=0))
