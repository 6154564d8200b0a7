"""The work split every schedule mode uses, written once in plain Python.

This is the executable statement of the rules every backend follows: sequence b has
ceil(rows_b / R) groups of up to R rows, each with the key tiles [lo_b, hi_b) of the sequence's
window: hi_b = ceil(end_b / BLOCK_N) for end_b the row_end of its last row, lo_b =
start_b // BLOCK_N for start_b the row_start of its first row (0 without `row_starts`). Units
are numbered sequence-major, group-major: a group with span = hi_b - lo_b > 0 tiles holds
PIECE_COST + span units, first PIECE_COST that stand for its set-up and hold no tile, then one
unit a key tile (a group with no tile holds none); program p of G takes units
[p*total//G, (p+1)*total//G). The set-up units make the split even in time, not only in
tiles: a piece costs its set-up (query rows into the operand, the key ring's first fill)
whatever its length, so a program that starts a group scores PIECE_COST tiles fewer (a
program whose range begins inside a group sets that one up uncharged: every program but the
first does, so it is common to them; docs/perf-notes.md, fifteenth session: the V4 decode
shapes 2-15% faster on the H200). Table mode's records may place the programs' ends by an
instance's own split (`table_unit`): the same units, ends moved onto its stage rounds, or each
program given one run of stages of one group where every group can have programs of its own
(`allot_run`, `allot_unit`). Prefill program (g, part) takes global rows [g*R, g*R+R), split at
sequence starts, and cuts each piece's tiles [start // BLOCK_N, ceil(end / BLOCK_N)) (its first
row's start, its last row's end) into `parts` equal shares.
Tile numbers in pieces are the sequence's own (absolute): key n lies in tile n // BLOCK_N.

Guards (docs/contract.md, "Memory safety"): every read of query_start_loc is clamped into
[0, rows] and a sequence's end row is at least its start row; every read of row_ends into
[0, cap] (the kernels' cap is max_seq_len, no more than the table and a 2-D out cover), and of
row_starts into [0, that row's end] (a sequence's window start into [0, its end]). A valid
input is left as it is, so these are the rules for every input; for a broken one they decide
which cells are scored, and no piece names a row past the rows or a key past the cap.

Who transcribes it: worksplit/kernel.py (`cta_range`, the Table records), the Triton kernels'
Free/Table/Prefill loops (backends/triton/kernels.py), the FlyDSL kernels line by line
(backends/flydsl/kernels.py) and the opus piece iterators (backends/opus/csrc/worksplit.h).
tests/test_flydsl.py checks `cta_range` against the records the Triton kernel writes, and
tests/test_opus_build.py runs worksplit.h against this module.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from ..core.records import RECORD_FIELDS, RECORD_INTS

# (sequence, first row, end row, first tile, end tile): rows [r0, r1) of sequence b against key
# tiles [t0, t1); rows of one group share every loaded key tile.
Piece = tuple[int, int, int, int, int]

NO_CAP = 2**31 - 1  # row ends are int32: a cap that clamps nothing from above

PIECE_COST = 16  # units a group's set-up is charged before its tiles (backends/opus/csrc/args.h: kPieceCost)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def seq_lanes(max_seqs: int) -> int:
    """The power of two >= max_seqs that Free mode and the records kernel reduce over (SEQ_P2)."""
    return 1 << (max(max_seqs, 1) - 1).bit_length()


def group_units(span: int) -> int:
    """A group's units: PIECE_COST for its set-up, then one a key tile; none without a tile."""
    return PIECE_COST + span if span > 0 else 0


def seq_start(qsl: Sequence[int], b: int, num_rows: int) -> int:
    """query_start_loc[b] as the kernels read it: clamped into [0, num_rows]."""
    return min(max(qsl[b], 0), num_rows)


def row_end(row_ends: Sequence[int], r: int, cap: int) -> int:
    """row_ends[r] as the kernels read it: clamped into [0, cap]."""
    return min(max(row_ends[r], 0), cap)


def row_start(row_starts: Sequence[int] | None, r: int, end: int) -> int:
    """row_starts[r] as the kernels read it: clamped into [0, end] (0 without row_starts)."""
    return 0 if row_starts is None else min(max(row_starts[r], 0), end)


def seq_units(qsl: Sequence[int], row_ends: Sequence[int], b: int, rows: int, block_n: int,
              cap: int = NO_CAP, row_starts: Sequence[int] | None = None
              ) -> tuple[int, int, int, int, int, int]:
    """(qa, qb, end, lo, stride, units) of sequence b: its groups score tiles [lo, lo + span),
    span = ceil(end / block_n) - lo, each group taking stride = PIECE_COST + span units (none
    at all when span is 0)."""
    qa = seq_start(qsl, b, len(row_ends))
    qb = max(seq_start(qsl, b + 1, len(row_ends)), qa)
    end = row_end(row_ends, qb - 1, cap) if qb > qa else 0
    lo = row_start(row_starts, qa, end) // block_n if qb > qa else 0
    span = cdiv(end, block_n) - lo
    return qa, qb, end, lo, PIECE_COST + span, cdiv(qb - qa, rows) * group_units(span)


def cta_range(qsl: Sequence[int], row_ends: Sequence[int], pid: int, nprog: int, rows: int,
              block_n: int, lanes: int, cap: int = NO_CAP, row_starts: Sequence[int] | None = None
              ) -> tuple[int, int, int, int]:
    """Program pid's (u_begin, u_end, first sequence b, units before b) of nprog programs.

    `lanes` is the power of two >= max_seqs the kernels reduce over (SEQ_P2): lanes past
    num_seqs hold zero units, and when there is no work at all they count into b (harmless,
    since u_begin == u_end then; kept so that records match the Triton kernel's bit for bit).
    """
    units = lane_units(qsl, row_ends, rows, block_n, lanes, cap, row_starts)
    total = sum(units)
    u_begin = pid * total // nprog
    u_end = (pid + 1) * total // nprog
    return (u_begin, u_end, *first_seq(units, u_begin))


def lane_units(qsl: Sequence[int], row_ends: Sequence[int], rows: int, block_n: int, lanes: int,
               cap: int = NO_CAP, row_starts: Sequence[int] | None = None) -> list[int]:
    """Each lane's units as the kernels reduce them: the sequences', then zeros to `lanes`."""
    num_seqs = len(qsl) - 1
    return [seq_units(qsl, row_ends, s, rows, block_n, cap, row_starts)[5] if s < num_seqs else 0
            for s in range(lanes)]


def first_seq(units: Sequence[int], u: int) -> tuple[int, int]:
    """(b, units before b): the lane holding unit u, from lane_units (cta_range's note on lanes)."""
    b = base = cum = 0
    for n in units:  # cum is non-decreasing, so `before` holds on a prefix of the lanes
        cum += n
        if cum <= u:
            b += 1
            base += n
    return b, base


# An instance's Table split (Instance.table_split): (tiles a stage, stages a round, the tiles a
# later group's set-up counts as). UNIT_SPLIT, every instance's unless it says otherwise, is the
# units' own: program p's range is [p * total // G, (p + 1) * total // G), as cta_range.
UNIT_SPLIT = (1, 1, PIECE_COST)


def instance_split(inst) -> tuple[int, int, int]:
    """The Table split of an Instance: its own (table_split), else the units' own."""
    return inst.table_split or UNIT_SPLIT


def group_stages(lo: int, span: int, stage: int) -> int:
    """The stages a group of tiles [lo, lo + span) touches, counted from its first tile's stage."""
    return cdiv(lo + span, stage) - lo // stage


def allot_run(seqs: Sequence[tuple[int, int, int, int, int, int]], nprog: int,
              split: tuple[int, int, int]) -> int | None:
    """The stages a program holds when the Table programs are allotted to row groups, else None.

    With no more groups than programs, each group can have programs of its own: L is the fewest
    stages a program holds for which every group's stages, cut into runs of L from its first
    stage, need no more than nprog programs (past one round, L is rounded up to whole rounds);
    the programs take the runs in unit order, one run each, spread evenly over the program ids
    (allot_unit), and the programs between them hold nothing. No program then sets up a second
    group, which the cost split cannot promise: a program whose range crosses a group's start pays
    its set-up on top of its tiles. Allotted only when L x stage is within a later set-up's charge
    of the mean tiles a program (a few long groups among short ones are cheaper cut across
    groups). docs/perf-notes.md, thirty-seventh session: 5-25% faster where the cost split gave
    programs two pieces (the i8 harness, an H100). `seqs`: seq_units of every sequence."""
    stage, rounds, setup = split
    if stage * rounds == 1:
        return None  # the units' own split
    groups = [units // stride for _, _, _, _, stride, units in seqs]
    if not 0 < sum(groups) <= nprog:
        return None
    tiles = sum(g * (stride - PIECE_COST) for g, (_, _, _, _, stride, _) in zip(groups, seqs))
    stages = [group_stages(lo, stride - PIECE_COST, stage) if g else 0
              for g, (_, _, _, lo, stride, _) in zip(groups, seqs)]
    low, high = 1, max(stages)
    while low < high:  # the fewest stages a program for which the runs fit the programs
        mid = (low + high) // 2
        if sum(g * cdiv(n, mid) for g, n in zip(groups, stages)) <= nprog:
            high = mid
        else:
            low = mid + 1
    run = cdiv(low, rounds) * rounds if low > rounds else low
    return None if run * stage * nprog > tiles + setup * nprog else run


def run_starts(seqs: Sequence[tuple[int, int, int, int, int, int]], run: int, stage: int) -> list[int]:
    """Every run's first unit, in unit order, then the total, when the groups are cut into runs of
    `run` stages (allot_run): a group's first run starts at its set-up units, a later one on its
    stage."""
    starts, ucum = [], 0
    for _, _, _, lo, stride, units in seqs:
        runs = cdiv(group_stages(lo, stride - PIECE_COST, stage), run)
        origin = PIECE_COST - lo % stage  # the group's first stage, in units from the group's start
        for gstart in range(ucum, ucum + units // stride * stride, stride):
            starts += [gstart] + [gstart + origin + part * run * stage for part in range(1, runs)]
        ucum += units
    return starts + [ucum]


def allot_unit(starts: list[int], k: int, nprog: int) -> int:
    """Table program k's first unit (k = nprog: the total) of an allotment whose runs start at
    `starts` (run_starts): program k starts run ceil(k x runs / nprog), so where the runs are fewer
    than the programs the working programs are spread evenly over the ids (as the cost split's
    are), not packed into the first ones (docs/perf-notes.md, thirty-ninth session)."""
    return starts[cdiv(k * (len(starts) - 1), nprog)]


def cost_unit(seqs: Sequence[tuple[int, int, int, int, int, int]], k: int, nprog: int,
              split: tuple[int, int, int]) -> int:
    """Table program k's first unit by the cost split (table_unit says how and why)."""
    stage, rounds, setup = split
    tiles = sum(units // stride * (stride - PIECE_COST) for _, _, _, _, stride, units in seqs)
    if rounds > 1 and tiles < nprog * stage * rounds:
        rounds, setup = 1, min(setup, stage)
    grain = stage * rounds
    costs = [units // stride * (setup + stride - PIECE_COST) for _, _, _, _, stride, units in seqs]
    x = k * sum(costs) // nprog
    ccum = ucum = 0
    for (_, _, _, lo, stride, units), cost in zip(seqs, costs):
        if ccum + cost > x:
            span = stride - PIECE_COST
            off = x - ccum
            j = off // (setup + span)
            o = off - j * (setup + span) - setup  # tiles into group j (<= 0: inside its set-up)
            gstart = ucum + j * stride
            if o <= 0:
                return gstart + min(off - j * (setup + span), PIECE_COST)
            origin = lo - lo % stage
            rel = min(max((lo + o - origin + grain // 2) // grain * grain + origin - lo, 0), span)
            return gstart + PIECE_COST + rel
        ccum += cost
        ucum += units
    return ucum


def table_ends(seqs: Sequence[tuple[int, int, int, int, int, int]], nprog: int,
               split: tuple[int, int, int]) -> list[int]:
    """Every Table program's first unit and the total (table_unit at k = 0 .. nprog), the
    allotment's run found once. `seqs`: seq_units of every sequence."""
    run = allot_run(seqs, nprog, split)
    if run is None:
        return [cost_unit(seqs, k, nprog, split) for k in range(nprog + 1)]
    starts = run_starts(seqs, run, split[0])
    return [allot_unit(starts, k, nprog) for k in range(nprog + 1)]


def table_unit(qsl: Sequence[int], row_ends: Sequence[int], k: int, nprog: int, rows: int, block_n: int,
               split: tuple[int, int, int] = UNIT_SPLIT, cap: int = NO_CAP,
               row_starts: Sequence[int] | None = None) -> int:
    """Table program k's first unit (k = nprog: the total), by the instance's split (stage, round,
    setup): the allotment's (allot_run, allot_unit) where it allots the programs to groups, else
    this cost split (cost_unit). The programs share a cost in which each group counts `setup` tiles
    and then its tiles; program k starts at the point k / nprog of it, moved to the group and tile
    it falls in (a point inside a group's set-up stays among the group's set-up units, which hold no
    tile) and then to the nearest multiple of round x stage tiles counted from the group's first
    stage (its first tile rounded down to a stage), never past the group's tiles. The ends only
    move, in order, so the programs' ranges still hold every unit once. Why: a body whose consumers
    take a piece's stages in turn gives each of them the same stages of a piece cut on a round, and
    no stage is loaded by two programs; every program sets its first group up whatever the split
    charges, so only a later group's set-up should separate programs (docs/perf-notes.md,
    thirty-third session). When the programs average less than a round of tiles (fewer tiles than
    nprog x stages a round x stage), the ends go on stages and a later set-up counts as a stage:
    rounding to a round would leave programs idle and give the others two stages a consumer
    (docs/perf-notes.md, thirty-fourth session). UNIT_SPLIT gives cta_range's ends."""
    seqs = [seq_units(qsl, row_ends, s, rows, block_n, cap, row_starts) for s in range(len(qsl) - 1)]
    return table_ends(seqs, nprog, split)[k]


def schedule_records(qsl: Sequence[int], row_ends: Sequence[int], nprog: int, rows: int,
                     block_n: int, lanes: int, cap: int = NO_CAP,
                     row_starts: Sequence[int] | None = None,
                     split: tuple[int, int, int] = UNIT_SPLIT) -> list[list[int]]:
    """Table mode's records (core/records.py's layout), one a program: [u_begin, u_end, b, base,
    qa, qb, lo, span], the last four sequence b's as seq_units reads them (zeros past the
    sequences); the ends by `split` (table_unit, all at once: table_ends)."""
    assert len(RECORD_FIELDS) == RECORD_INTS
    num_seqs = len(qsl) - 1
    units = lane_units(qsl, row_ends, rows, block_n, lanes, cap, row_starts)
    if split != UNIT_SPLIT:
        seqs = [seq_units(qsl, row_ends, s, rows, block_n, cap, row_starts) for s in range(num_seqs)]
        ends = table_ends(seqs, nprog, split)
    records = []
    for p in range(nprog):
        if split == UNIT_SPLIT:
            u_begin, u_end, b, base = cta_range(qsl, row_ends, p, nprog, rows, block_n, lanes, cap, row_starts)
        else:
            u_begin, u_end = ends[p], ends[p + 1]
            b, base = first_seq(units, u_begin)
        first = [0, 0, 0, 0]
        if b < num_seqs:
            qa, qb, _, lo, stride, _ = seq_units(qsl, row_ends, b, rows, block_n, cap, row_starts)
            first = [qa, qb, lo, stride - PIECE_COST]
        records.append([u_begin, u_end, b, base, *first])
    return records


def free_work(qsl: Sequence[int], row_ends: Sequence[int], u: int, u_end: int, b: int, base: int,
              rows: int, block_n: int, cap: int = NO_CAP,
              row_starts: Sequence[int] | None = None) -> Iterator[Piece]:
    """The pieces a Table/Free program scores, from its (u_begin, u_end, b, base)."""
    num_seqs = len(qsl) - 1
    while u < u_end and 0 <= b < num_seqs:  # b < 0, u < base: only from corrupted records
        qa, qb, end, tlo, stride, units = seq_units(qsl, row_ends, b, rows, block_n, cap, row_starts)
        lo = max(u - base, 0)
        hi = min(u_end - base, units)
        if hi > lo:
            u = base + hi
        while lo < hi:  # the groups this program touches, each with its own tile range
            j = lo // stride
            t0 = max(lo - j * stride - PIECE_COST, 0)
            t1 = min(hi - j * stride, stride) - PIECE_COST
            r0 = qa + j * rows
            if t1 > t0:  # not only set-up units of group j
                yield b, r0, min(r0 + rows, qb), tlo + t0, tlo + t1
            lo = (j + 1) * stride
        base += units
        b += 1


def prefill_work(qsl: Sequence[int], row_ends: Sequence[int], group: int, part: int, rows: int,
                 block_n: int, parts: int, cap: int = NO_CAP,
                 row_starts: Sequence[int] | None = None) -> Iterator[Piece]:
    """The pieces Prefill program (group, part) scores."""
    num_seqs, num_rows = len(qsl) - 1, len(row_ends)
    live = seq_start(qsl, num_seqs, num_rows)
    row0 = group * rows
    chunk_end = min(row0 + rows, live)
    lo, hi = 0, num_seqs
    while hi - lo > 1:  # last sequence starting at or before row0
        mid = (lo + hi) // 2
        if seq_start(qsl, mid, num_rows) <= row0:
            lo = mid
        else:
            hi = mid
    b = lo
    qa = seq_start(qsl, b, num_rows) if num_seqs > 0 else 0
    while b < num_seqs and qa < chunk_end:
        qb = max(seq_start(qsl, b + 1, num_rows), qa)
        r0, r1 = max(row0, qa), min(chunk_end, qb)
        end = row_end(row_ends, r1 - 1, cap) if r1 > r0 else 0
        lo = row_start(row_starts, r0, end) // block_n if r1 > r0 else 0
        span = cdiv(end, block_n) - lo
        yield b, r0, r1, lo + part * span // parts, lo + (part + 1) * span // parts
        b += 1
        qa = qb


def row_window(row_ends: Sequence[int], row_starts: Sequence[int] | None, r: int,
               cap: int = NO_CAP) -> tuple[int, int]:
    """The keys [start, end) row r scores, as the kernels read them."""
    end = row_end(row_ends, r, cap)
    return row_start(row_starts, r, end), end


def piece_tiles(row_ends: Sequence[int], piece: Piece, block_n: int, cap: int = NO_CAP,
                row_starts: Sequence[int] | None = None) -> range:
    """Key tiles of a piece that may hold a key of its rows' windows (tiles before the group
    start, the rows' smallest row_start, and past the group end, their largest row_end, store
    nothing, so kernels may skip them)."""
    _, r0, r1, t0, t1 = piece
    wins = [row_window(row_ends, row_starts, r, cap) for r in range(r0, r1)]
    gbeg = min((w[0] for w in wins), default=0)
    gend = max((w[1] for w in wins), default=0)
    return range(max(t0, gbeg // block_n), min(t1, cdiv(gend, block_n)))
