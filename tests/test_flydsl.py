"""The FlyDSL backend on a machine that cannot run it: why not, its rules, its work split, its ISA.

- available() names what is missing here, and pinning the backend raises with that reason;
- worksplit.cta_range (the Python statement of the unit numbering the FlyDSL kernels transcribe)
  matches the records of the shared Triton schedule kernel, with and without row_starts, and
  every mode covers every key of every live row's window exactly once;
- a model of score_group's lanes (its tile range, key clamps and store mask, on Python ints)
  visits worksplit.piece_tiles, stores only inside each row's window and loads keys only from
  the 4-key groups between the group start and the group end, for broken row tensors too;
- every FlyDSL kernel x mode of spec.check_matrix() compiles for gfx950 (tests/flydsl_compile_check.py,
  two subprocesses), with no `error:` on stderr, the gfx950 target, one scaled MFMA per
  (scale block, row, 16-head tile), no spills and no scratch, the out stored in its dtype's
  width after one rounding conversion, and row_starts read exactly by the kernels given it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.worksplit import rules as worksplit
from mqa_logits_mxfp4.backends.flydsl.backend import BACKEND
from mqa_logits_mxfp4.backends.flydsl.instances import INSTANCES
from mqa_logits_mxfp4.backends.flydsl.spec import MODES, check_matrix
from mqa_logits_mxfp4.backends.flydsl.toolchain import PINNED_VERSION, find_lld, installed_version
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.core.problem import ProblemKey

sys.path.insert(0, str(Path(__file__).parent))
from helpers import BROKEN_ROW_TENSORS  # noqa: E402

CHECK = Path(__file__).with_name("flydsl_compile_check.py")
HAVE_FLYDSL = importlib.util.find_spec("flydsl") is not None
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
needs_flydsl = pytest.mark.skipif(not HAVE_FLYDSL, reason="flydsl is not installed (pip install -e .[flydsl]); "
                                                          "CI installs it, so there these checks run")


def gfx950_key(**over) -> ProblemKey:
    base = dict(device=torch.device("cuda", 0), arch="gfx950", cu_num=256, heads=64, head_dim=128,
                page_size=64, pages_per_block=1, gather=False, max_rows=8, max_seqs=4, max_qlen=2,
                max_seq_len=4096)
    return ProblemKey(**{**base, **over})


# ---------------------------------------------------------------------------------------------
# availability and rules


runnable_here = pytest.mark.skipif(BACKEND.available() is None, reason="flydsl can run on this machine")


@runnable_here
def test_available_names_what_is_missing_here():
    reason = BACKEND.available()
    if not HAVE_FLYDSL:
        assert (reason.check, "pip install -e .[flydsl]" in reason.message) == ("install", True)
    elif installed_version() != PINNED_VERSION:
        assert reason.check == "install" and PINNED_VERSION in reason.message
    elif not torch.version.hip:
        assert reason.check == "torch"
        assert f"need a ROCm build of torch; got torch {torch.__version__}" in reason.message
    else:
        assert reason.check == "device" and "gfx950" in reason.message


@runnable_here
def test_pinning_flydsl_raises_with_that_reason(isolated_dispatch):
    isolated_dispatch.setenv("MQA_LOGITS_MXFP4_BACKEND", "flydsl")
    mx.reload()
    with pytest.raises(mx.PinnedBackendError) as e:
        mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=4, max_seqs=2, max_seq_len=1024)
    assert "pinned backend flydsl (MQA_LOGITS_MXFP4_BACKEND) cannot serve" in str(e.value)
    assert str(BACKEND.available()) in str(e.value)


@runnable_here
def test_pinning_a_flydsl_instance_raises_with_that_reason(isolated_dispatch):
    isolated_dispatch.setenv("MQA_LOGITS_MXFP4_INSTANCE", "fly_h64_r1w4")
    mx.reload()
    with pytest.raises(mx.PinnedBackendError) as e:
        mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=4, max_seqs=2, max_seq_len=1024)
    assert "pinned instance flydsl/fly_h64_r1w4" in str(e.value) and str(BACKEND.available()) in str(e.value)


@runnable_here
@pytest.mark.skipif(not INTERPRETING, reason="a CPU config needs the Triton interpreter: TRITON_INTERPRET=1")
def test_explain_lists_flydsl_with_its_reason(isolated_dispatch):
    cfg = mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=4, max_seqs=2, max_seq_len=1024)
    assert f"flydsl: {BACKEND.available()}" in cfg.explain()


def test_instances_are_registered_and_never_validated():
    assert registry.get("flydsl") is BACKEND
    names = [i.name for i in BACKEND.instances()]
    assert {"fly_h32_r1w4", "fly_h64_r1w4", "fly_h128_r1w4"} <= set(names) and len(set(names)) == len(names)
    assert {i.name for i in INSTANCES if not i.canonical} == {i.name.replace("fly_", "fly_mxsc_") for i in INSTANCES if i.canonical}
    for inst in INSTANCES:
        assert inst.validated_on == () and not inst.validated("gfx950")
        assert inst.canonical == (inst.family == "scaled")
        assert inst.arches == ("gfx950",) and inst.modes == tuple(MODES) and {8, 64} <= set(inst.page_sizes)
        assert registry.find_instance(inst.name) == (BACKEND, inst)


@pytest.mark.parametrize("over, reason", [
    (dict(arch="gfx942"), "arch: flydsl kernels are built for gfx950 only; got gfx942"),
    (dict(arch="sm_90"), "arch: flydsl kernels are built for gfx950 only; got sm_90"),
    (dict(head_dim=256), "head_dim: flydsl kernels need head_dim 128; got 256"),
])
def test_backend_rules(over, reason):
    assert reason in [str(r) for r in BACKEND.supports(gfx950_key(**over))]


def test_backend_fits_the_model_layouts():
    for over in (dict(), dict(heads=32, page_size=8, pages_per_block=32), dict(heads=32, page_size=8, gather=True)):
        key = gfx950_key(**over)
        assert BACKEND.supports(key) == [] and BACKEND.ranked_picks(key)


@pytest.mark.parametrize("name, over, reason", [
    ("fly_h64_r1w4", dict(heads=32), "heads: fly_h64_r1w4 needs heads in (64,); got 32"),
    ("fly_h64_r1w4", dict(page_size=12), "page_size: fly_h64_r1w4 needs page_size in (8, 16, 32, 64, 128); got 12"),
    ("fly_h64_r2w4", dict(gather=True),
     "gather: fly_h64_r2w4 has 2 rows; gather mode needs a one-row instance (each row has its own table)"),
])
def test_instance_rules(name, over, reason):
    inst = next(i for i in INSTANCES if i.name == name)
    assert reason in [str(r) for r in BACKEND.instance_supports(inst, gfx950_key(**over))]


def test_default_rule():
    decode = BACKEND.ranked_picks(gfx950_key(max_qlen=3))
    # the full-rate family first (not canonical), then the canonical one in the same row order
    assert decode[0] == (next(i for i in INSTANCES if i.name == "fly_mxsc_h64_r4w4"), "free")
    families = [i.family for i, _ in decode]
    assert families == sorted(families) and set(families) == {"mxsc", "scaled"}  # mxsc < scaled
    assert [(i.rows, m) for i, m in decode if i.family == "mxsc"] == [(i.rows, m) for i, m in decode if i.family == "scaled"]
    prefill = BACKEND.ranked_picks(gfx950_key(max_qlen=512, max_rows=2048))
    assert prefill[0][1] == "prefill" and prefill[0][0].rows == 4
    gather = BACKEND.ranked_picks(gfx950_key(heads=32, page_size=8, gather=True))
    assert {i.rows for i, _ in gather} == {1}


def test_launch_arguments_match_the_kernel_signature():
    """The host side's argument list against the launcher's parameters (order, count, 16-byte rule,
    row_starts' pointer, the kernel the out dtype and row_starts select)."""
    cfg = SimpleNamespace(instance="fly_h64_r2w4", heads=64, page_size=64, pages_per_block=1, gather=False,
                          max_seqs=5, max_seq_len=90, table_grid=7, prefill_grid=(3, 2))
    q = torch.zeros(4, 64, 64, dtype=torch.uint8)
    t = dict(q=q, q_scale=torch.zeros(4, 64, 4, dtype=torch.uint8), kv_cache=torch.zeros(3, 64, 64, dtype=torch.uint8),
             kv_scale=torch.zeros(3, 64, 4, dtype=torch.uint8), weights=torch.zeros(4, 64, dtype=torch.bfloat16),
             block_tables=torch.zeros(2, 9, dtype=torch.int32), query_start_loc=torch.tensor([0, 2, 4], dtype=torch.int32),
             row_ends=torch.ones(4, dtype=torch.int32), out=torch.zeros(4, 100), out_offsets=None, records=None)
    args = BACKEND.launch_args(cfg, "prefill", **t)
    # num_seqs, lanes, rows, key cap (max_seq_len), pages, flat out size, strides (w, bt, out), grid
    assert args[12:] == [2, 8, 4, 90, 3, 0, 64, 9, 100, 3, 2]
    assert args[11] == t["row_ends"].data_ptr()   # no row_starts: a pointer the kernel never reads
    assert BACKEND.launch_args(cfg, "free", **t)[-2:] == [7, 1]
    flat = BACKEND.launch_args(cfg, "free", **{**t, "out": torch.zeros(500), "out_offsets": torch.zeros(4, dtype=torch.int64)})
    assert (flat[15], flat[17], flat[20]) == (90, 500, 0)   # a flat out: its size, no row stride
    starts = torch.tensor([0, 1, 0, 3], dtype=torch.int32)
    assert BACKEND.launch_args(cfg, "free", **t, row_starts=starts)[11] == starts.data_ptr()
    names = ["q", "qs", "kv", "ks", "w", "bt", "qsl", "re", "out", "oo", "sched", "rs", "num_seqs", "lanes",
             "num_rows", "seq_cap", "num_pages", "out_numel", "stride_w", "stride_bt", "stride_out",
             "grid_x", "grid_y"]
    assert len(args) == len(names)
    spec = BACKEND.kernel_spec(cfg, "prefill", t["weights"], t["out"], None)
    assert (spec.out_dtype, spec.has_starts, spec.flat_out, spec.w_bf16) == ("f32", False, False, True)
    for dtype, token in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        narrow = BACKEND.kernel_spec(cfg, "free", t["weights"].float(), t["out"].to(dtype), torch.zeros(4), starts)
        assert (narrow.out_dtype, narrow.has_starts, narrow.flat_out, narrow.w_bf16) == (token, True, True, False)
        assert narrow.name.endswith(f"_f32_out{token}_starts")
    if HAVE_FLYDSL:
        import inspect

        from mqa_logits_mxfp4.backends.flydsl.kernels import OUT_TYPES, build
        from mqa_logits_mxfp4.core.outputs import OUT_CODES
        launcher = build(spec)
        assert list(inspect.signature(launcher.func).parameters) == names + ["stream"]
        assert set(OUT_TYPES) == set(OUT_CODES)   # a store type for each out dtype the op takes
    with pytest.raises(mx.MqaLogitsError, match="q in 16-byte vectors, so its data must be 16-byte aligned"):
        BACKEND.launch_args(cfg, "free", **{**t, "q": q.view(-1)[8:8 + 64 * 64 * 3].view(3, 64, 64)})


# ---------------------------------------------------------------------------------------------
# the work split: one Python statement, checked against the shared Triton schedule kernel


def ragged_cases(seed=7, count=6):
    """(query_start_loc, row_ends) lists: empty sequences, zero windows, long and short contexts."""
    rng = random.Random(seed)
    cases = [([0], []), ([0, 0, 0], []), ([0, 3], [0, 0, 0]), ([0, 1, 1, 4], [5, 64, 65, 200])]
    for _ in range(count):
        qsl, ends = [0], []
        for _ in range(rng.randint(1, 7)):
            rows = rng.choice([0, 1, 1, 2, 3, 5, 9])
            ctx = rng.choice([0, 1, 63, 64, 65, 300, 1000])
            ends += sorted(min(ctx, max(0, ctx - rows + 1 + j + rng.randint(-2, 0))) for j in range(rows))
            qsl.append(qsl[-1] + rows)
        cases.append((qsl, ends))
    return cases


def lanes_for(qsl):
    return 1 << max(0, len(qsl) - 2).bit_length()   # next power of two >= num_seqs, as SEQ_P2


def valid_starts(qsl, ends, rng):
    """row_starts as the contract has them (in [0, row_end], non-decreasing along a sequence):
    a sliding window of a random width a sequence, width 0 (empty windows) included."""
    starts = []
    for b in range(len(qsl) - 1):
        width = rng.choice([0, 1, 5, 63, 64, 100, 2**30])
        starts += [max(0, ends[r] - width) for r in range(qsl[b], qsl[b + 1])]
    return starts


def broken_starts(ends, rng):
    """row_starts that break the contract: negative, past the row's end, decreasing, int32 limits."""
    return [rng.choice([-2**31, -5, 0, 1, 63, 64, 65, 500, 2**31 - 1, e + 1, e, rng.randint(-100, 1200)])
            for e in ends]


ROUND_SPLITS = ((4, 2, 8), (4, 3, 12), (2, 2, 16))  # (stage tiles, stages a round, set-up tiles)


def all_pieces(qsl, ends, starts, rows, block_n, nprog, parts, cap=worksplit.NO_CAP):
    """{mode: the pieces every program of one launch scores} (Free, and Table with the units' own
    split, share theirs; Table by the round splits too)."""
    lanes = lanes_for(qsl)
    table = {f"free/table {split}": [p for rec in worksplit.schedule_records(qsl, ends, nprog, rows, block_n, lanes,
                                                                               cap, starts, split)
                                     for p in worksplit.free_work(qsl, ends, *rec[:4], rows, block_n, cap, starts)]
             for split in (worksplit.UNIT_SPLIT, *ROUND_SPLITS)}
    groups = max(1, -(-len(ends) // rows))
    prefill = [p for g in range(groups) for part in range(parts)
               for p in worksplit.prefill_work(qsl, ends, g, part, rows, block_n, parts, cap, starts)]
    return {**table, "prefill": prefill}


# all_pieces' keys: Free with Table by the units' own split, Table by each round split, Prefill
MODES_SPLITS = tuple(f"free/table {split}" for split in (worksplit.UNIT_SPLIT, *ROUND_SPLITS)) + ("prefill",)


def triton_records(qsl, ends, starts, nprog, rows, block_n, cap=worksplit.NO_CAP, split=worksplit.UNIT_SPLIT):
    """The shared Triton schedule kernel's records (all RECORD_INTS fields) under the interpreter."""
    from mqa_logits_mxfp4.worksplit.kernel import build_schedule_kernel
    records = torch.full((nprog, 8), -1, dtype=torch.int32)
    row_ends = torch.tensor(ends or [0], dtype=torch.int32)
    row_starts = row_ends if starts is None else torch.tensor(starts or [0], dtype=torch.int32)
    build_schedule_kernel[(nprog,)](torch.tensor(qsl, dtype=torch.int32), row_ends, row_starts, records,
                                    len(qsl) - 1, len(ends), cap, R=rows, BLOCK_N=block_n, SEQ_P2=lanes_for(qsl),
                                    HAS_STARTS=starts is not None, STAGE=split[0], ROUND=split[1], SETUP=split[2])
    return records.tolist()


@pytest.mark.skipif(not INTERPRETING, reason="the Triton schedule kernel runs on the CPU under TRITON_INTERPRET=1")
@pytest.mark.parametrize("rows, block_n", [(1, 64), (2, 64), (4, 32)])
def test_cta_range_matches_the_triton_schedule_records(rows, block_n):
    rng = random.Random(rows * 1000 + block_n)
    for qsl, ends in ragged_cases():
        for starts in (None, valid_starts(qsl, ends, rng), broken_starts(ends, rng)):
            for nprog in (1, 3, 8):
                want = worksplit.schedule_records(qsl, ends, nprog, rows, block_n, lanes_for(qsl), row_starts=starts)
                assert triton_records(qsl, ends, starts, nprog, rows, block_n) == want, \
                    (qsl, ends, starts, nprog)
            for split in ROUND_SPLITS:
                want = worksplit.schedule_records(qsl, ends, 8, rows, block_n, lanes_for(qsl), row_starts=starts,
                                                  split=split)
                assert triton_records(qsl, ends, starts, 8, rows, block_n, split=split) == want, \
                    (qsl, ends, starts, split)


@pytest.mark.skipif(not INTERPRETING, reason="the Triton schedule kernel runs on the CPU under TRITON_INTERPRET=1")
@pytest.mark.parametrize("rows, block_n", [(1, 64), (2, 64), (4, 32)])
def test_broken_row_tensors_keep_the_split_inside_rows_and_cap(rows, block_n):
    """Row tensors that break the contract: the records kernel reads them through the same guards
    as worksplit/rules.py, and no piece of any mode names a row past the rows or a key past the cap
    (row_starts absent, or broken too)."""
    rng = random.Random(rows * 1000 + block_n)
    for qsl, ends, cap in BROKEN_ROW_TENSORS:
        for starts in (None, broken_starts(ends, rng)):
            for nprog in (1, 3, 8):
                want = worksplit.schedule_records(qsl, ends, nprog, rows, block_n, lanes_for(qsl), cap, starts)
                assert triton_records(qsl, ends, starts, nprog, rows, block_n, cap) == want, \
                    (qsl, ends, starts, nprog)
                want = worksplit.schedule_records(qsl, ends, nprog, rows, block_n, lanes_for(qsl), cap, starts,
                                                  ROUND_SPLITS[0])
                assert triton_records(qsl, ends, starts, nprog, rows, block_n, cap, ROUND_SPLITS[0]) == want, \
                    (qsl, ends, starts, nprog)
                for piece in [p for ps in all_pieces(qsl, ends, starts, rows, block_n, nprog, 3, cap).values()
                              for p in ps]:
                    _, r0, r1, t0, _ = piece
                    assert 0 <= r0 and r1 <= len(ends) and t0 >= 0, (qsl, ends, starts, piece)
                    tiles = worksplit.piece_tiles(ends, piece, block_n, cap, starts)
                    assert not tiles or (tiles.start >= 0 and tiles.stop * block_n < cap + block_n), \
                        (qsl, ends, starts, piece)


def covered(qsl, ends, pieces, block_n, starts=None):
    """(row, key) -> times stored, from the pieces the programs of one launch score."""
    seen = {}
    for piece in pieces:
        b, r0, r1, _, _ = piece
        assert qsl[b] <= r0 <= r1 <= qsl[b + 1], piece   # Prefill may visit an empty sequence
        for t in worksplit.piece_tiles(ends, piece, block_n, row_starts=starts):
            for r in range(r0, r1):
                lo, hi = worksplit.row_window(ends, starts, r)
                for n in range(max(t * block_n, lo), min((t + 1) * block_n, hi)):
                    seen[r, n] = seen.get((r, n), 0) + 1
    return seen


@pytest.mark.parametrize("rows, block_n", [(1, 64), (2, 64), (4, 16)])
def test_every_mode_stores_every_key_of_every_live_row_once(rows, block_n):
    """Every key of every live row's window [row_starts[r], row_ends[r]) is stored exactly once."""
    rng = random.Random(rows * 1000 + block_n)
    for qsl, ends in ragged_cases(seed=11):
        for starts in (None, valid_starts(qsl, ends, rng), valid_starts(qsl, ends, rng)):
            want = {(r, n): 1 for r in range(qsl[-1]) for n in range(*worksplit.row_window(ends, starts, r))}
            for nprog, parts in ((1, 1), (2, 2), (5, 3), (13, 3)):
                for mode, pieces in all_pieces(qsl, ends, starts, rows, block_n, nprog, parts).items():
                    assert covered(qsl, ends, pieces, block_n, starts) == want, (mode, qsl, ends, starts, nprog)


def test_each_group_start_is_charged_its_set_up_units():
    """A group holds 16 set-up units before its tiles (worksplit.PIECE_COST): the program that
    starts more groups scores fewer tiles, and a range of set-up units only scores nothing.
    Expected pieces worked out by hand; the shared Triton records must give the same ranges."""
    # three one-row sequences of 50 tiles, two programs: 3 x (16 + 50) = 198 units, 99 each
    qsl, ends = [0, 1, 2, 3], [3200, 3200, 3200]
    recs = worksplit.schedule_records(qsl, ends, 2, 1, 64, lanes_for(qsl))
    assert [r[:4] for r in recs] == [[0, 99, 0, 0], [99, 198, 1, 66]]
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in recs] == [
        [(0, 0, 1, 0, 50), (1, 1, 2, 0, 17)],     # 50 + 17 tiles: two set-ups charged
        [(1, 1, 2, 17, 50), (2, 2, 3, 0, 50)]]    # 33 + 50 tiles: one
    # one sequence of 10 tiles, four programs: 26 units, 6 or 7 each
    qsl, ends = [0, 1], [640]
    recs = worksplit.schedule_records(qsl, ends, 4, 1, 64, lanes_for(qsl))
    assert [r[:2] for r in recs] == [[0, 6], [6, 13], [13, 19], [19, 26]]
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in recs] == [
        [], [], [(0, 0, 1, 0, 3)], [(0, 0, 1, 3, 10)]]
    if INTERPRETING:
        assert triton_records(qsl, ends, None, 4, 1, 64) == recs


def test_round_split_puts_the_ends_on_rounds_and_charges_later_set_ups():
    """Table records by a round split (4-tile stages, two a round, a later set-up as 8 tiles):
    worked out by hand. Three one-row sequences of 50 tiles, two programs: a cost of 3 x (8 + 50)
    = 174, 87 each; point 87 is tile 87 - 58 - 8 = 21 of sequence 1, which moves to 24 (the
    nearest multiple of 8 from its first stage, tile 0). The units' own split (above) cut it at 17."""
    qsl, ends = [0, 1, 2, 3], [3200, 3200, 3200]
    recs = worksplit.schedule_records(qsl, ends, 2, 1, 64, lanes_for(qsl), split=(4, 2, 8))
    assert [r[:4] for r in recs] == [[0, 66 + 16 + 24, 0, 0], [106, 198, 1, 66]]
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in recs] == [
        [(0, 0, 1, 0, 50), (1, 1, 2, 0, 24)],
        [(1, 1, 2, 24, 50), (2, 2, 3, 0, 50)]]
    # sequence 1's window from key 200 (tiles [3, 50)): a cost of 58 + 55 + 58 = 171, point 85 is
    # its tile 3 + 85 - 58 - 8 = 22, and the rounds count from its first stage (tile 0): 24 again
    starts = [0, 200, 0]
    recs = worksplit.schedule_records(qsl, ends, 2, 1, 64, lanes_for(qsl), row_starts=starts, split=(4, 2, 8))
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64, row_starts=starts)) for r in recs] == [
        [(0, 0, 1, 0, 50), (1, 1, 2, 3, 24)],
        [(1, 1, 2, 24, 50), (2, 2, 3, 0, 50)]]
    if INTERPRETING:
        assert triton_records(qsl, ends, starts, 2, 1, 64, split=(4, 2, 8)) == recs


def test_round_split_with_less_than_a_round_a_program_puts_the_ends_on_stages():
    """Fewer tiles than programs x a round's tiles: the ends go on stages and a later set-up counts
    as a stage, worked out by hand. Two one-row sequences of 8 tiles, four programs, split (4, 2,
    8): 16 tiles < 4 x 8, so a cost of 2 x (4 + 8) = 24, 6 each; point 6 is tile 2 of sequence 0,
    moved to 4, point 12 is sequence 1's start, point 18 its tile 2, moved to 4: each program one
    stage. On rounds (a cost of 2 x (8 + 8), 8 each) points 8 and 24 would fall in set-ups, and two
    programs would hold only set-up units and no tile. With two programs (16 tiles = 2 x 8) the
    ends stay on rounds."""
    qsl, ends = [0, 1, 2], [512, 512]
    recs = worksplit.schedule_records(qsl, ends, 4, 1, 64, lanes_for(qsl), split=(4, 2, 8))
    assert [r[:4] for r in recs] == [[0, 20, 0, 0], [20, 24, 0, 0], [24, 44, 1, 24], [44, 48, 1, 24]]
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in recs] == [
        [(0, 0, 1, 0, 4)], [(0, 0, 1, 4, 8)], [(1, 1, 2, 0, 4)], [(1, 1, 2, 4, 8)]]
    two = worksplit.schedule_records(qsl, ends, 2, 1, 64, lanes_for(qsl), split=(4, 2, 8))
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in two] == [[(0, 0, 1, 0, 8)], [(1, 1, 2, 0, 8)]]
    if INTERPRETING:
        assert triton_records(qsl, ends, None, 4, 1, 64, split=(4, 2, 8)) == recs
        assert triton_records(qsl, ends, None, 2, 1, 64, split=(4, 2, 8)) == two


def test_round_split_allots_programs_to_groups_when_each_can_have_its_own():
    """No more row groups than programs: each program takes one run of one group's stages, worked
    out by hand (split (4, 2, 8)). Three one-row sequences of 8 tiles (2 stages each), four
    programs: one stage a run needs 6 programs, two need 3, so a sequence a program and the last
    idle; the cost split would give program 1 the last 4 tiles of sequence 0 and the first 4 of
    sequence 1 (two set-ups). Fewer runs than programs are spread over the program ids."""
    qsl, ends = [0, 1, 2, 3], [512, 512, 512]
    recs = worksplit.schedule_records(qsl, ends, 4, 1, 64, lanes_for(qsl), split=(4, 2, 8))
    assert [r[:2] for r in recs] == [[0, 24], [24, 48], [48, 72], [72, 72]]
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in recs] == [
        [(0, 0, 1, 0, 8)], [(1, 1, 2, 0, 8)], [(2, 2, 3, 0, 8)], []]
    # one sequence, its window from key 200: tiles [3, 20), stages 0-4 (5); three programs take
    # runs of 2 stages from stage 0: tiles 3-8 (with the set-up's 16 units), 8-16 and 16-20
    one, one_ends, starts = [0, 1], [1280], [200]
    runs = worksplit.schedule_records(one, one_ends, 3, 1, 64, lanes_for(one), row_starts=starts, split=(4, 2, 8))
    assert [r[:2] for r in runs] == [[0, 21], [21, 29], [29, 33]]
    assert [list(worksplit.free_work(one, one_ends, *r[:4], 1, 64, row_starts=starts)) for r in runs] == [
        [(0, 0, 1, 3, 8)], [(0, 0, 1, 8, 16)], [(0, 0, 1, 16, 20)]]
    # one sequence of 8 tiles (2 stages) on four programs: two runs of one stage, spread over the
    # ids (program k starts run ceil(k x 2 / 4): 0, 1, 1, 2), so programs 0 and 2 work
    two = worksplit.schedule_records([0, 1], [512], 4, 1, 64, lanes_for([0, 1]), split=(4, 2, 8))
    assert [r[:2] for r in two] == [[0, 20], [20, 20], [20, 24], [24, 24]]
    assert [list(worksplit.free_work([0, 1], [512], *r[:4], 1, 64)) for r in two] == [
        [(0, 0, 1, 0, 4)], [], [(0, 0, 1, 4, 8)], []]
    # sequences of 64, 4 and 4 tiles: runs fitting four programs are 8 stages (32 tiles), more than
    # the mean 18 tiles and a set-up's 8; the cost split (3 x 8 + 72 = 96, 24 each, ends on
    # 8-tile rounds) stays: 16, 24 and 24 tiles of sequence 0, then the two short ones together
    qsl, ends = [0, 1, 2, 3], [4096, 256, 256]
    cost = worksplit.schedule_records(qsl, ends, 4, 1, 64, lanes_for(qsl), split=(4, 2, 8))
    assert [r[:2] for r in cost] == [[0, 32], [32, 56], [56, 80], [80, 120]]
    assert [list(worksplit.free_work(qsl, ends, *r[:4], 1, 64)) for r in cost] == [
        [(0, 0, 1, 0, 16)], [(0, 0, 1, 16, 40)], [(0, 0, 1, 40, 64)], [(1, 1, 2, 0, 4), (2, 2, 3, 0, 4)]]
    if INTERPRETING:
        assert triton_records([0, 1, 2, 3], [512, 512, 512], None, 4, 1, 64, split=(4, 2, 8)) == recs
        assert triton_records(one, one_ends, starts, 3, 1, 64, split=(4, 2, 8)) == runs
        assert triton_records([0, 1], [512], None, 4, 1, 64, split=(4, 2, 8)) == two
        assert triton_records(qsl, ends, None, 4, 1, 64, split=(4, 2, 8)) == cost


def test_row_starts_shrink_the_work_and_leave_the_no_starts_split_as_it_was():
    """Starts past the first tiles drop those tiles from the units and the pieces; all-zero starts
    give the same records and pieces as no row_starts."""
    qsl, ends = [0, 2, 3], [300, 301, 64]
    full = worksplit.seq_units(qsl, ends, 0, 2, 64)
    assert full == (0, 2, 301, 0, 16 + 5, 16 + 5) and worksplit.seq_units(qsl, ends, 0, 2, 64, row_starts=[0, 0, 0]) == full
    assert worksplit.seq_units(qsl, ends, 0, 2, 64, row_starts=[130, 131, 0]) == (0, 2, 301, 2, 16 + 3, 16 + 3)
    assert worksplit.seq_units(qsl, ends, 1, 2, 64, row_starts=[0, 0, 64]) == (2, 3, 64, 1, 16, 0)  # empty window
    for qsl, ends in ragged_cases(seed=3):
        zeros = [0] * len(ends)
        assert all_pieces(qsl, ends, zeros, 2, 64, 5, 3) == all_pieces(qsl, ends, None, 2, 64, 5, 3)


# ---------------------------------------------------------------------------------------------
# score_group's lanes on Python ints: a model of kernels.py's lines (same names), checked against
# worksplit/rules.py (the kernels cannot run here, so this is the check of their new lines)


def score_group_model(ends, starts, piece, rows, block_n, cap, offsets=None, out_numel=0):
    """(tiles visited, (row, key) cells stored, keys loaded) of kernels.py's score_group for one
    piece: its group start/end, tile range, key clamps, per-lane window and store mask."""
    _, r0, r1, t0, t1 = piece
    gend = max(worksplit.row_end(ends, min(r0 + r, r1 - 1), cap) for r in range(rows))
    lanes = []   # lane c of a 16-lane row stores row r0 + c: (my_row, my_start, my_end)
    for c in range(16):
        my_row = min(r0 + c, r1 - 1)
        my_end = worksplit.row_end(ends, my_row, cap)
        lanes.append((my_row, worksplit.row_start(starts, my_row, my_end), my_end))
    gbeg = min(my_start for _, my_start, _ in lanes)   # _row_min, before the store cuts
    for c, (my_row, my_start, my_end) in enumerate(lanes):
        my_end = my_end if c < rows and r0 + c < r1 else 0
        if offsets is not None:   # a flat out: the row ends at the out's end, a negative offset stores nothing
            my_end = min(my_end, max(out_numel - offsets[my_row], 0)) if offsets[my_row] >= 0 else 0
        lanes[c] = (my_row, min(my_start, my_end), my_end)
    kmax = max(gend - 1, 0)
    kmin, t = 0, t0
    if starts is not None:
        kmin, t = min(gbeg, kmax), max(t0, gbeg // block_n)
    t_stop = min(t1, -(-gend // block_n))
    tiles, stored, loaded = [], [], set()
    while t < t_stop:
        tiles.append(t)
        for wave in range(block_n // 16):
            key0 = t * block_n + wave * 16
            for g in range(4):
                kq = min(max(key0 + 4 * g, (kmin // 4) * 4), (kmax // 4) * 4)
                loaded.update(range(kq, kq + 4))
                for c in range(16):
                    loaded.add(min(max(key0 + c, kmin), kmax))
                    my_row, my_start, my_end = lanes[c]
                    stored += [(my_row, k) for k in range(key0 + 4 * g, key0 + 4 * g + 4) if my_start <= k < my_end]
        t += 1
    # the loads stay in the 4-key groups (one page each) from the group start's to the group end's
    return tiles, stored, loaded, (kmin // 4) * 4, (kmax // 4) * 4 + 3


def check_score_group_model(qsl, ends, starts, rows, block_n, cap, nprog, parts, offsets=None, out_numel=0):
    """Per mode: the model visits piece_tiles, stores only inside each row's window (and flat
    out) and loads keys only from the group start's 4-key group to the group end's. Returns
    {mode: sorted list of the cells stored}."""
    result = {}
    for mode, pieces in all_pieces(qsl, ends, starts, rows, block_n, nprog, parts, cap).items():
        cells = []
        for piece in pieces:
            if piece[2] <= piece[1]:
                continue   # the kernels skip a piece without rows (Prefill's empty sequences)
            tiles, stored, loaded, lo, hi = score_group_model(ends, starts, piece, rows, block_n, cap, offsets, out_numel)
            assert tiles == list(worksplit.piece_tiles(ends, piece, block_n, cap, starts)), (mode, piece, starts)
            assert not loaded or lo <= min(loaded) and max(loaded) <= hi, (mode, piece, starts)
            cells += stored
        for r, n in cells:
            lo, hi = worksplit.row_window(ends, starts, r, cap)
            room = max(out_numel - offsets[r], 0) if offsets is not None and offsets[r] >= 0 else 0
            assert lo <= n < hi and (offsets is None or n < room), (mode, r, n, starts)
        result[mode] = sorted(cells)
    return result


@pytest.mark.parametrize("rows, block_n", [(1, 64), (2, 64), (4, 16)])
def test_score_group_model_stores_each_window_once(rows, block_n):
    rng = random.Random(rows * 1000 + block_n + 1)
    for qsl, ends in ragged_cases(seed=5, count=3):
        for starts in (None, valid_starts(qsl, ends, rng)):
            want = [(r, n) for r in range(qsl[-1]) for n in range(*worksplit.row_window(ends, starts, r))]
            for nprog, parts in ((1, 1), (3, 2), (7, 3)):
                got = check_score_group_model(qsl, ends, starts, rows, block_n, worksplit.NO_CAP, nprog, parts)
                assert got == dict.fromkeys(MODES_SPLITS, want), (qsl, ends, starts, nprog)   # each once


@pytest.mark.parametrize("rows, block_n", [(1, 64), (2, 64), (4, 16)])
def test_score_group_model_on_broken_row_tensors(rows, block_n):
    """Broken row tensors and starts (and a flat out with short or negative offsets): every cell
    stored lies in its row's window and out (overlapping sequences may store one twice); no key
    is loaded outside the group's keys."""
    rng = random.Random(rows * 1000 + block_n + 2)
    for qsl, ends, cap in BROKEN_ROW_TENSORS:
        for starts in (None, broken_starts(ends, rng), valid_starts([0, len(ends)], ends, rng)):
            check_score_group_model(qsl, ends, starts, rows, block_n, cap, 3, 3)
            offsets = [rng.choice([-1, 0, 10, 60, 200]) for _ in ends]
            check_score_group_model(qsl, ends, starts, rows, block_n, cap, 3, 3, offsets, rng.choice([0, 64, 150]))


# ---------------------------------------------------------------------------------------------
# compile checks: every kernel x mode for gfx950, ISA facts per kernel


def run_check(*args, timeout=600):
    envs = {k: v for k, v in os.environ.items() if k not in ("ROCM_PATH", "FLYDSL_GPU_ARCH", "ARCH")}
    return subprocess.Popen([sys.executable, str(CHECK), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=envs)


@functools.cache
def compiled_records():
    """One subprocess per CPU core (two at most), each compiling its shard of the matrix."""
    shards = max(1, min(2, os.cpu_count() or 1))
    procs = [run_check("--route", "isa", "--shard", f"{i}/{shards}") for i in range(shards)]
    records, failures = {}, []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            failures.append(f"exit {p.returncode}: {err[-3000:]}")
        for line in out.splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                records[rec["name"]] = rec
    return records, failures


MATRIX = check_matrix()


@needs_flydsl
def test_compile_check_covers_every_instance_and_mode():
    records, failures = compiled_records()
    assert failures == []
    assert set(records) == {s.name for s in MATRIX}
    assert {(r["spec"]["heads"], r["spec"]["rows"], r["spec"]["mode"]) for r in records.values()} >= {
        (i.heads[0], i.rows, m) for i in INSTANCES for m in MODES}


def test_check_matrix_covers_narrow_outs_and_row_starts():
    """Per family and layout option (page size x pages per entry, gather, flat out, weights): a
    bf16 out, an f16 out and row_starts; row_starts also in every mode at the DeepSeek-V4 layout."""
    def layout(s):
        return (s.family, s.page_size, s.pages_per_block, s.gather, s.flat_out, s.w_bf16)
    options = {layout(s) for s in MATRIX}
    for option in options:
        specs = [s for s in MATRIX if layout(s) == option]
        assert {"f32", "bf16", "f16"} <= {s.out_dtype for s in specs} and any(s.has_starts for s in specs), option
    for family in ("scaled", "mxsc"):
        assert {s.mode for s in MATRIX if s.family == family and s.has_starts and s.page_size == 64} == set(MODES)
    assert len({s.name for s in MATRIX}) == len(MATRIX)


@needs_flydsl
@pytest.mark.parametrize("spec", MATRIX, ids=[s.name for s in MATRIX])
def test_kernel_compiles_for_gfx950(spec):
    rec = compiled_records()[0].get(spec.name)
    assert rec is not None, "the compile-check subprocess did not reach this kernel"
    assert rec["error"] is None and "error:" not in rec["stderr"], rec["error"] or rec["stderr"]
    f = rec["facts"]
    assert f["target"] == "amdgcn-amd-amdhsa-unknown-gfx950"
    tiles = spec.rows * spec.heads // 16  # (row, 16-head tile) operands of a 16-key step
    if spec.family == "scaled":
        # one scaled MFMA per scale block and operand, unit scales: docs/numerics.md step 3
        assert f["scaled_mfma"] == 4 * tiles and f["real_scales"] == 0
        assert f["group_segment_fixed_size"] == spec.rows * spec.heads * 84   # staged queries only
    else:
        # mxsc: one MFMA an operand over the whole head_dim with the real scales in registers (a
        # quarter of scaled's four), plus scaled's four for the fallback
        assert spec.family == "mxsc"
        assert f["scaled_mfma"] == (1 + 4) * tiles and f["real_scales"] == tiles
        # plus the raw scale words and a flag an operand
        assert f["group_segment_fixed_size"] == spec.rows * spec.heads * 88 + 4 * tiles
    assert (f["vgpr_spill_count"], f["sgpr_spill_count"], f["private_segment_fixed_size"]) == (0, 0, 0)
    assert f["vgpr_count"] <= 256, "more than half the register file: one wave per SIMD"
    # the out: a lane's 4 keys, one predicated store each, in the out dtype's width, after one
    # f32 -> out conversion (v_cvt_pk_bf16_f32 / v_cvt_f16_f32: round to nearest even) a key
    width = {"f32": "dword", "bf16": "short", "f16": "short"}[spec.out_dtype]
    assert f["global_stores"] == {width: 4}
    assert (f["cvt_bf16"], f["cvt_f16"]) == {"f32": (0, 0), "bf16": (4, 0), "f16": (0, 4)}[spec.out_dtype]
    # row_starts is the kernel's last argument, read by exactly the kernels specialized on it
    assert (f["kernarg_offsets"][-1] in f["kernarg_loads"]) == spec.has_starts


@needs_flydsl
def test_one_kernel_links_with_lld():
    """The route that produces a real code object: ld.lld >= 18 (Debian lld-19) behind a private
    ROCM_PATH. CI installs lld-19; elsewhere the ISA route above is the whole check."""
    if find_lld() is None:
        pytest.skip("no ld.lld >= 18 on this machine (apt-get install lld-19)")
    p = run_check("--route", "lld", "--shard", f"0/{len(MATRIX)}")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    rec = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert rec["route"] == "lld" and rec["error"] is None and "error:" not in rec["stderr"]
    assert rec["facts"]["target"] == "amdgcn-amd-amdhsa-unknown-gfx950" and rec["facts"]["scaled_mfma"] > 0
