"""The opus backend on a machine without a GPU: why it cannot run here, its rules, its C++
registry, its exact operand encodings, its work split, its launcher checks, its JIT cache, and
the ISA of every kernel for sm_90 (nvcc), gfx942 and gfx950 (clang-22).

Nothing here executes a kernel: the H200 session runs the conformance suite (pytest -m gpu).
The g++ host program (tests/opus_host_check.cpp) runs the host-and-device headers on the CPU;
tests/opus_compile_check.py compiles the kernel translation unit (torch-free) for every target.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.backends.opus import instances as opus_instances
from mqa_logits_mxfp4.backends.opus import jit
from mqa_logits_mxfp4.backends.opus.backend import BACKEND
from mqa_logits_mxfp4.core.outputs import OUT_CODES
from mqa_logits_mxfp4.core.problem import ProblemKey
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.worksplit import rules as worksplit

sys.path.insert(0, str(Path(__file__).parent))
import opus_compile_check as cc  # noqa: E402
from helpers import BROKEN_ROW_TENSORS  # noqa: E402

HOST_CHECK = Path(__file__).with_name("opus_host_check.cpp")
CXX = shutil.which("g++") or shutil.which("c++")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler (g++)")
INSTANCES = opus_instances.INSTANCES


def sm90_key(**over) -> ProblemKey:
    base = dict(device=torch.device("cuda", 0), arch="sm_90", cu_num=132, heads=64, head_dim=128, page_size=64,
                pages_per_block=1, gather=False, max_rows=8, max_seqs=4, max_qlen=2, max_seq_len=4096)
    return ProblemKey(**{**base, **over})


# ---------------------------------------------------------------------------------------------
# availability, rules, the default pick


def test_available_names_what_is_missing_here():
    reason = BACKEND.available()
    assert reason is not None, "this test expects a machine that cannot run the opus kernels"
    if jit.platform() is None:
        assert reason.check == "torch"
        assert f"need a CUDA (sm_90) or ROCm (gfx942, gfx950) build of torch; got torch {torch.__version__} (CPU-only)" \
            in reason.message
    else:
        assert reason.check in ("device", "build", "install", "compiler")


def test_pinning_opus_raises_with_that_reason(isolated_dispatch):
    isolated_dispatch.setenv("MQA_LOGITS_MXFP4_BACKEND", "opus")
    mx.reload()
    with pytest.raises(mx.PinnedBackendError) as e:
        mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=4, max_seqs=2, max_seq_len=1024)
    assert "pinned backend opus (MQA_LOGITS_MXFP4_BACKEND) cannot serve" in str(e.value)
    assert str(BACKEND.available()) in str(e.value)


def test_explain_lists_opus_with_its_reason(isolated_dispatch):
    if registry.get("triton").supports(sm90_key(device=torch.device("cpu"), arch="cpu")):
        pytest.skip("a CPU config needs the Triton interpreter: TRITON_INTERPRET=1")
    cfg = mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=4, max_seqs=2, max_seq_len=1024)
    assert f"opus: {BACKEND.available()}" in cfg.explain()


def test_instances_are_registered_and_validated_only_where_they_ran():
    assert registry.get("opus") is BACKEND
    names = [i.name for i in BACKEND.instances()]
    assert len(set(names)) == len(names) and {"sm90_f16_r1w4", "gfx950_mxf4_r1w2", "gfx942_f16_r1w4"} <= set(names)
    for inst in BACKEND.instances():
        # sm_90's mma.sync families passed the conformance suite on an H200; nothing AMD has ever
        # run (gfx942 shares the family name f16 with sm_90, and is still not validated anywhere)
        ran = inst.arches == ("sm_90",) and "sm_90" in opus_instances.VALIDATED_ON[inst.family]
        assert inst.validated_on == (("sm_90",) if ran else ())
        assert not inst.validated("gfx950") and not inst.validated("gfx942")
        # the union body's windows come from its pre-pass: Free mode only (registry.h OPUS_UNION_MODES)
        assert inst.modes == (("free",) if inst.family in ("i8u", "i8uc") else ("table", "free", "prefill"))
        assert inst.block_n == 64
        assert re.fullmatch(r"(sm90|gfx942|gfx950)_(f16|fp8|fp8fold|fold|mxf4|mxsc|i8|i8u|i8c|i8uc|i8w)_r\d+w\d+", inst.name)
        assert inst.name == f"{inst.arches[0].replace('_', '')}_{inst.family}_r{inst.rows}w{inst.warps}"
        assert all(inst.rows * h <= 256 for h in inst.heads)
        if inst.arches == ("gfx942",):   # 256 B of FP16 query operand a (row, head) in 64 KB of LDS
            assert all(inst.rows * h <= 128 for h in inst.heads) and inst.warps == 4
        if inst.family == "fold":        # two query operands (folded and canonical) a group
            assert all(inst.rows * h <= 128 for h in inst.heads)
        assert registry.find_instance(inst.name) == (BACKEND, inst)
    assert opus_instances.VALIDATED_ON["f16"] == ("sm_90",)


@pytest.mark.parametrize("over, reason", [
    (dict(arch="cpu"), "arch: the opus kernels are written for sm_90, gfx942, gfx950; got cpu"),
    (dict(arch="gfx90a"), "arch: the opus kernels are written for sm_90, gfx942, gfx950; got gfx90a"),
    (dict(head_dim=256), "head_dim: the opus kernels need head_dim 128; got 256"),
])
def test_backend_rules(over, reason):
    assert reason in [str(r) for r in BACKEND.supports(sm90_key(**over))]


@pytest.mark.parametrize("name, over, reason", [
    ("sm90_f16_r4w4", dict(heads=128), "heads: sm90_f16_r4w4 needs heads in (16, 32, 64); got 128"),
    ("sm90_f16_r1w4", dict(page_size=12), "page_size: sm90_f16_r1w4 needs page_size in (8, 16, 32, 64, 128); got 12"),
    ("sm90_f16_r2w4", dict(gather=True),
     "gather: sm90_f16_r2w4 has 2 rows; gather mode needs a one-row instance (each row has its own table)"),
    ("sm90_i8u_r4w12", dict(heads=32), "gather: sm90_i8u_r4w12 scores the union of each sequence's row tables: "
                                       "gather mode only"),
    ("sm90_i8u_r8w12", dict(heads=32, page_size=8, gather=True, max_qlen=16, max_seq_len=32768),
     "union: sm90_i8u_r8w12 its pre-pass holds min(max_qlen, rows a group) x block_table_width <= 16384 entries; "
     "got 8 x 4096"),
    ("sm90_i8u_r2w12", dict(heads=32, page_size=8, gather=True, max_qlen=1, max_seq_len=2 ** 20),
     "union: sm90_i8u_r2w12 its pre-pass holds min(max_qlen, rows a group) x block_table_width <= 16384 entries; "
     "got 1 x 131072"),
    ("gfx950_mxf4_r1w2", dict(), "arch: gfx950_mxf4_r1w2 runs on gfx950; got sm_90"),
    ("gfx942_f16_r1w4", dict(), "arch: gfx942_f16_r1w4 runs on gfx942; got sm_90"),
    ("gfx942_f16_r2w4", dict(arch="gfx942", heads=128), "heads: gfx942_f16_r2w4 needs heads in (16, 32, 64); got 128"),
])
def test_instance_rules(name, over, reason):
    inst = next(i for i in INSTANCES if i.name == name)
    assert reason in [str(r) for r in BACKEND.instance_supports(inst, sm90_key(**over))]


@pytest.mark.parametrize("max_qlen, max_seq_len", [(8, 16384), (16384, 16384), (2, 65536)])
def test_union_rule_takes_prefills_in_runs_of_groups(max_qlen, max_seq_len):
    # A union holds a sequence's rows where max_qlen of them fit and runs of whole groups where
    # they do not (a 16384-row prefill at 2048 blocks a row: runs of 8 rows); only a group's own
    # entries must fit (two rows of 8192 blocks fit a union of 16384 entries).
    inst = next(i for i in INSTANCES if i.name == "sm90_i8u_r8w12")
    key = sm90_key(heads=32, page_size=8, gather=True, max_qlen=max_qlen, max_seq_len=max_seq_len)
    assert BACKEND.instance_supports(inst, key) == []


def test_default_rule_per_arch():
    decode = BACKEND.ranked_picks(sm90_key(max_qlen=2))
    assert decode[0][0].name == "sm90_i8_r2w16" and {m for _, m in decode} == {"free"}  # fewest rows holding MTP 2
    names = [i.name for i, _ in decode]
    assert names.index("sm90_i8_r2w16") < names.index("sm90_i8_r2w12")  # w16 first at equal rows
    assert names.index("sm90_fp8_r1w4") < names.index("sm90_fold_r2w4")  # then the mma.sync bodies as before
    # r8 holds <= 32 heads; i8's Prefill form in every mode (i8w, 64 heads) after i8, then the
    # canonical i8 body (i8c), before the mma.sync bodies
    assert [i.family for i, _ in decode[:11]] == ["i8"] * 6 + ["i8w"] + ["i8c"] * 3 + ["fp8"]
    one_row = [n for n in names if n.startswith("sm90_i8_r1")]
    assert one_row == ["sm90_i8_r1w16", "sm90_i8_r1w12", "sm90_i8_r1w20"]  # the split body last (slower so far)
    prefill = BACKEND.ranked_picks(sm90_key(heads=32, page_size=8, pages_per_block=32, max_qlen=4096, max_rows=4096))
    assert prefill[0] == (next(i for i in INSTANCES if i.name == "sm90_i8_r8w12"), "prefill")  # widest first
    assert [i.family for i, _ in prefill][:12] == ["i8"] * 5 + ["i8c"] * 4 + ["fold"] * 3  # r2w16 holds no 32 heads
    gather = BACKEND.ranked_picks(sm90_key(heads=32, page_size=8, gather=True, max_qlen=4))
    # gather: the one-row bodies first; the union body (any rows, Free mode) after i8's, as only a
    # tuned table knows how much a batch's row lists overlap
    assert {i.rows for i, _ in gather if i.family not in ("i8u", "i8uc")} == {1}
    fams = [i.family for i, _ in gather]
    assert fams.index("i8u") == fams.count("i8") and {m for i, m in gather if i.family == "i8u"} == {"free"}
    assert fams.index("i8c") == fams.count("i8") + fams.count("i8u")  # one-row, as i8 in gather mode
    # the canonical union body after i8c's, as i8u after i8
    assert fams.index("i8uc") == fams.index("i8c") + fams.count("i8c") and {m for i, m in gather if i.family == "i8uc"} == {"free"}
    for fam in ("i8u", "i8uc"):
        assert [i.name for i, _ in gather if i.family == fam] == [f"sm90_{fam}_r4w12", f"sm90_{fam}_r8w12", f"sm90_{fam}_r2w12"]
    gfx950 = [i.name for i, _ in BACKEND.ranked_picks(sm90_key(arch="gfx950"))]
    # the scaled MFMA over the whole head_dim first (fewest rows holding the group), then mxf4
    assert gfx950[:2] == ["gfx950_mxsc_r2w2", "gfx950_mxsc_r4w2"] and gfx950.index("gfx950_mxf4_r2w2") == 3
    gfx942 = BACKEND.ranked_picks(sm90_key(arch="gfx942"))
    # folded FP8 (not canonical), then one FP8 MFMA a block, then two FP16 ones; 64 heads: r4 holds <= 32
    assert [i.name for i, _ in gfx942] == ["gfx942_fp8fold_r2w4", "gfx942_fp8fold_r1w4", "gfx942_fp8_r2w4",
                                          "gfx942_fp8_r1w4", "gfx942_f16_r2w4", "gfx942_f16_r1w4"]
    assert BACKEND.ranked_picks(sm90_key(arch="gfx942", heads=32, max_qlen=4096, max_rows=4096))[0] == \
        (next(i for i in INSTANCES if i.name == "gfx942_fp8fold_r4w4"), "prefill")
    assert BACKEND.ranked_picks(sm90_key(arch="sm_80")) == []


def test_grid_sizes_follow_the_kernels_launch_bounds():
    inst = next(i for i in INSTANCES if i.name == "sm90_f16_r1w4")
    big = dict(max_seqs=256, max_seq_len=65536, max_qlen=1, max_rows=256)
    assert BACKEND.grid_sizes(inst, sm90_key(heads=64, **big))[0] == 132 * 4
    assert BACKEND.grid_sizes(inst, sm90_key(heads=128, **big))[0] == 132 * 3   # 128 heads: 3 CTAs an SM


def test_launch_passes_the_bindings_signature_and_wraps_its_checks(monkeypatch):
    """The Python call against bindings.cpp's `launch` parameters (order and count), and a
    ValueError from the launcher's own checks surfaces as the package's InputError."""
    src = (cc.CSRC / "bindings.cpp").read_text()
    sig = re.search(r"\nvoid launch\((.*?)\) \{", src, re.S).group(1)
    params = [re.split(r"[\s&*]+", p.strip())[-1] for p in sig.split(",")]
    calls = []

    class FakeModule:
        def launch(self, *args):
            calls.append(args)
            raise ValueError("opus sm90_f16_r1w4: q must be uint8; got int32")

        def registry(self):
            return [dict(id=i, name=n, arch=a, family=f, rows=r, warps=w, block_n=bn, stages=s, ctas_per_sm=c,
                         heads=list(h)) for i, n, a, f, r, w, bn, s, c, h in opus_instances.REGISTRY]

    monkeypatch.setattr(jit, "_loaded", FakeModule())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=1234))
    cfg = SimpleNamespace(instance="sm90_f16_r1w4", table_grid=7, prefill_grid=(3, 2),
                          key=SimpleNamespace(heads=64, page_size=64, pages_per_block=1, gather=False,
                                              max_seq_len=1000, max_qlen=2))
    t = torch.zeros(1)
    with pytest.raises(mx.MqaLogitsError, match="q must be uint8; got int32"):
        BACKEND.launch(cfg, "prefill", *([t] * 9), None, None)
    assert len(calls[0]) == len(params) == 24
    assert params[:2] == ["instance_id", "mode"] and params[-6:] == ["grid_x", "parts", "stream", "path_stats",
                                                                     "row_starts", "max_qlen"]
    assert calls[0][0] == 0 and calls[0][1] == 2 and calls[0][-6:] == (3, 2, 1234, None, None, 2)
    assert BACKEND.instances() == INSTANCES   # the C++ registry's entries equal the mirror
    # the hot path's Launcher takes the same fixed arguments, in launch's order
    init = re.search(r"pybind11::init<([^>]*)>\(\)((?:\s*,\s*pybind11::arg\(\"\w+\"\))+)", src)
    names = re.findall(r'pybind11::arg\("(\w+)"\)', init.group(2))
    assert len(init.group(1).split(",")) == len(names) == 10
    assert names == params[:2] + params[13:20] + params[-1:]
    assert calls[0][:2] + calls[0][13:20] + calls[0][-1:] == BACKEND._fixed_args(cfg, "prefill")


# ---------------------------------------------------------------------------------------------
# the host program: registry, encodings, fast division, work split, launcher checks


@functools.cache
def host_program() -> Path:
    out = Path(tempfile.mkdtemp(prefix="opus-host-")) / "opus_host_check"
    subprocess.run([CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{cc.CSRC}", str(HOST_CHECK), "-o",
                    str(out)], check=True, capture_output=True, text=True)
    return out


def run_host(*args, stdin: str | None = None) -> str:
    p = subprocess.run([str(host_program()), *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@needs_cxx
def test_python_mirror_equals_the_cpp_registry():
    rows = [json.loads(line) for line in run_host("registry").splitlines()]
    assert [tuple(r[k] for k in ("id", "name", "arch", "family", "rows", "warps", "block_n", "stages",
                                 "ctas_per_sm")) + (tuple(r["heads"]),) for r in rows] == list(opus_instances.REGISTRY)
    for r in rows:
        assert tuple(r["page_sizes"]) == opus_instances.PAGE_SIZES and r["modes"] == "table,free,prefill"
        assert r["i8_stage_keys"] == opus_instances.I8_STAGE_KEYS  # what the i8 path counters count
        assert r["ctas_by_heads"] == [opus_instances.ctas_for_heads(r["ctas_per_sm"], h) for h in r["heads"]]
        assert r["i8_consumers"] == opus_instances.i8_consumers(r["warps"])  # kernels.cu's SmBody
        assert r["i8_table_setup"] == opus_instances.i8_table_setup(r["rows"], r["warps"])
    assert opus_instances.from_registry(rows) == INSTANCES


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@needs_cxx
def test_operand_encodings_are_exact():
    lines = [json.loads(line) for line in run_host("encodings").splitlines()]
    codes, words = lines[:16], lines[16]
    for rec in codes:
        c = rec["code"]
        value = E2M1[c & 7] * (-1.0 if c & 8 else 1.0)
        as_fp8 = lambda b: torch.tensor([b], dtype=torch.uint8).view(torch.float8_e4m3fn).float().item()  # noqa: E731
        as_f16 = lambda h: torch.tensor([h], dtype=torch.int16 if h < 32768 else torch.int32)  # noqa: E731
        f16 = lambda h: torch.tensor([h - 65536 if h >= 32768 else h], dtype=torch.int16).view(torch.float16).item()  # noqa: E731
        assert as_fp8(rec["fp8_key"]) == value * 2.0 ** -6 and as_fp8(rec["fp8_query"]) == value * 2.0 ** 6
        assert f16(rec["f16_key"]) == value * 2.0 ** -13 and f16(rec["f16_query"]) == value * 2.0 ** 13
        assert rec["f16_key"] & 0x7C00 or value == 0, "f16 key operands are all normal"
        del as_f16
    assert words == {"words": 20000, "bad_words": 0}


@needs_cxx
@pytest.mark.parametrize("what,shifts", [("i8", 4), ("i8key", 3)])
def test_int8_operands_are_exact_at_every_shift(what, shifts):
    """i8_encode.h: every E2M1 code at every block shift becomes 2 * value * 2^shift in its own
    byte, whatever its neighbours: signed for the queries and the canonical keys (shifts 0..3),
    the fast path's keys biased by 64 and below 128 (shifts 0..2)."""
    lines = [json.loads(line) for line in run_host(what).splitlines()]
    codes, total = lines[:-1], lines[-1]
    assert len(codes) == shifts * 16
    for rec in codes:
        c, d = rec["code"], rec["shift"]
        assert rec["value"] == E2M1[c & 7] * 2 * 2 ** d * (-1 if c & 8 else 1)
    assert total["bad"] == 0 and total["checked"] == shifts * 16 * 8 * 64 * 8


@needs_cxx
def test_int8_bias_slice_takes_the_key_bias_back():
    """i8_encode.h: for every column operand sum a fast group can have, the bias slice against
    the constant key operand is exactly -64 times the sum, in signed bytes."""
    total = json.loads(run_host("i8bias"))
    assert total == {"checked": 2 * 128 * 96 + 1, "bad": 0}


@needs_cxx
def test_fast_division_matches_integer_division():
    rec = json.loads(run_host("fastdiv"))
    assert rec["bad"] == 0 and rec["checked"] > 500000


@needs_cxx
def test_union_geometry_holds_every_sequence_in_whole_groups():
    """csrc/args.h's union_geometry against the rule as docs/opus-backend.md states it: a union
    holds a whole sequence where max_qlen rows fit in 16384 entries, else a run of the most whole
    groups that fit; the launch's segment count bounds every ragged batch's (a sequence of n rows
    has max(1, ceil(n / run)) runs), and the scratch holds utab, uends, upos and uqsl."""
    most, rng = 16384, random.Random(5)
    cases = [(8, 8, 2048, 16384, 8), (4, 4, 2048, 16384, 8), (16384, 8, 2048, 16384, 8), (16384, 4, 2048, 16384, 8),
             (70, 2, 700, 5013, 8), (3, 8, 4096, 32768, 8), (16, 8, 4096, 32768, 8), (1, 1, 10 ** 5, 2 ** 20, 8),
             (2, 8, 64, 100, 64), (100, 1, 5, 40000, 64)]
    cases += [(rng.choice([1, 2, 5, 8, 9, 64, 1000]), rng.choice([1, 2, 4, 8]), rng.choice([1, 100, 2048, 5000]),
               rng.choice([64, 4096, 65536]), rng.choice([8, 64, 256])) for _ in range(60)]
    batches = [[rng.choice([0, 1, 3, 8, 30, 200]) for _ in range(rng.randint(1, 12))] for _ in range(len(cases))]
    stdin = "".join(f"{q} {r} {bt} {msl} {span} {len(b)} {sum(b)} {most}\n" for (q, r, bt, msl, span), b in
                    zip(cases, batches))
    got = [json.loads(line) for line in run_host("union", stdin=stdin).splitlines()]
    assert len(got) == len(cases)
    for (q, r, bt, msl, span), batch, g in zip(cases, batches, got):
        width = min(bt, -(-msl // span))
        split = q * width > most
        run = (most // max(width, 1) // r * r) if split else q
        ok = run >= r if split else True
        assert (g["width"], g["split"], g["ok"]) == (width, int(split), int(ok)), (q, r, bt, msl, span, g)
        if not ok:
            continue
        assert (g["seg_rows"], g["ucap"]) == (run, run * width)
        assert g["ucap"] <= most and (not split or g["seg_rows"] % r == 0)
        segs = len(batch) + sum(batch) // run if split else len(batch)
        assert g["segs"] == segs
        if split:  # every ragged batch of these rows fits the launch's segments
            assert sum(max(1, -(-n // run)) for n in batch) <= segs
        rows = sum(batch)
        assert g["scratch"] == segs * run * width + rows + rows * run * width + segs + 1


def ragged_cases(seed=7, count=10):
    """(query_start_loc, row_ends): empty sequences, zero windows, long and short contexts."""
    rng = random.Random(seed)
    cases = [([0], []), ([0, 0, 0], []), ([0, 3], [0, 0, 0]), ([0, 1, 1, 4], [5, 64, 65, 200])]
    for _ in range(count):
        qsl, ends = [0], []
        for _ in range(rng.randint(1, 9)):
            rows = rng.choice([0, 1, 1, 2, 3, 5, 9, 17])
            ctx = rng.choice([0, 1, 63, 64, 65, 300, 1000, 5000])
            ends += sorted(min(ctx, max(0, ctx - rows + 1 + j + rng.randint(-2, 0))) for j in range(rows))
            qsl.append(qsl[-1] + rows)
        cases.append((qsl, ends))
    return cases


@needs_cxx
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_work_split_matches_the_python_statement(rows):
    """csrc/worksplit.h (what every opus kernel iterates) against worksplit/rules.py (whose
    cta_range tests/test_flydsl.py checks against the shared Triton schedule records), on valid
    row tensors (no cap) and on ones that break the contract (with the kernels' key cap)."""
    jobs = []
    cases = [(qsl, ends, worksplit.NO_CAP) for qsl, ends in ragged_cases(seed=rows)] + BROKEN_ROW_TENSORS
    rng = random.Random(rows)
    for qsl, ends, cap in cases:
        # windows from key 0, and with row_starts: non-decreasing along each sequence (the
        # contract), and random ones that break it (negative, past the end)
        starts_ok = [min(e, rng.choice([0, 1, 63, 64, 65, 200, 4000])) for e in ends]
        for b in range(len(qsl) - 1):
            for r in range(max(qsl[b], 0) + 1, min(qsl[b + 1], len(ends))):
                starts_ok[r] = min(max(starts_ok[r], starts_ok[r - 1]), ends[r])
        starts_bad = [rng.choice([-5, 0, 64, 130, 7000]) for _ in ends]
        for starts in (None, starts_ok, starts_bad):
            for nprog, parts in ((1, 1), (3, 2), (8, 3), (29, 5)):
                jobs.append((qsl, ends, cap, nprog, parts, starts))
    stdin = "".join(f"{rows} {nprog} {parts} {len(qsl) - 1} {len(ends)} {' '.join(map(str, qsl))} "
                    f"{' '.join(map(str, ends))} {cap}"
                    + ("" if starts is None else f" 1 {' '.join(map(str, starts))}") + "\n"
                    for qsl, ends, cap, nprog, parts, starts in jobs)
    out = [json.loads(line) for line in run_host("worksplit", stdin=stdin).splitlines()]
    assert len(out) == len(jobs)
    walks_from_broken = 0
    for (qsl, ends, cap, nprog, parts, starts), got in zip(jobs, out):
        lanes = len(qsl) - 1   # no padding lanes: those only count into b when there is no work
        want_ranges = [list(worksplit.cta_range(qsl, ends, p, nprog, rows, 64, lanes, cap, starts))
                       for p in range(nprog)]
        assert got["ranges"] == want_ranges, (qsl, ends, starts, nprog)
        want_free = [[list(pc) for pc in worksplit.free_work(qsl, ends, *r, rows, 64, cap, starts)]
                     for r in want_ranges]
        assert got["free"] == want_free, (qsl, ends, starts, nprog)
        # Table mode's records carry the first sequence's bounds (fields 4-7): worksplit.h computes
        # the same, and a walk started from them scores the same pieces
        want_bounds = [r[4:] for r in worksplit.schedule_records(qsl, ends, nprog, rows, 64, lanes, cap, starts)]
        assert got["bounds"] == want_bounds, (qsl, ends, starts, nprog)
        assert got["table"] == want_free, (qsl, ends, starts, nprog)
        # broken fields 4-7 (the records are the caller's tensor): clamped, rows inside the rows
        # and no piece longer than the cap's tiles; and taken (the walk differs from Free's)
        walks_from_broken += got["broken"] != want_free
        for b, r0, r1, t0, t1 in (pc for ps in got["broken"] for pc in ps):
            assert 0 <= r0 <= r1 <= len(ends) and 0 <= t0 <= t1 and t1 - t0 <= min(cap, 2**31 - 1) // 64 + 1, \
                (qsl, ends, starts, nprog, (b, r0, r1, t0, t1))
        # the round splits' records (worksplit/rules.py's table_unit) and the walks from them
        for split, got_split in zip(((4, 2, 8), (4, 3, 12)), got["rounds"]):
            want_recs = worksplit.schedule_records(qsl, ends, nprog, rows, 64, lanes, cap, starts, split)
            assert got_split["records"] == want_recs, (qsl, ends, starts, nprog, split)
            assert got_split["walks"] == [[list(pc) for pc in worksplit.free_work(qsl, ends, *r[:4], rows, 64, cap, starts)]
                                          for r in want_recs], (qsl, ends, starts, nprog, split)
        groups = max(1, -(-len(ends) // rows))
        want_prefill = [[list(pc) for pc in worksplit.prefill_work(qsl, ends, g, part, rows, 64, parts, cap, starts)]
                        for g in range(groups) for part in range(parts)]
        assert got["prefill"] == want_prefill, (qsl, ends, starts, parts)
    assert walks_from_broken > len(jobs) // 2, (walks_from_broken, len(jobs))


CHECK_MESSAGES = {
    "valid": "",
    "valid_wide": "",
    "heads": "sm90_f16_r1w4 has no kernel for heads 24",
    "page_size": "page_size must be one of 8, 16, 32, 64, 128; got 12",
    "q_dtype": "q must be uint8; got int32",
    "row_ends_int64": "row_ends must be int32; got int64",
    "kv_4d": "kv_cache must be 3-D; got 4-D",
    "q_rows": "q.shape[0] must be 3; got [2, 64, 64]",
    "q_heads": "q.shape[1] must be 64; got [3, 32, 64]",
    "q_scale_blocks": "q_scale.shape[2] must be 4; got [3, 64, 8]",
    "kv_page": "kv_cache.shape[1] must be 64; got [20, 32, 64]",
    "kv_scale_pages": "kv_scale.shape[0] must be 20; got [19, 64, 4]",
    "q_noncontig": "q must be contiguous",
    "weights_short": "weights.shape[0] must be >= 3; got [2, 64]",
    "weights_stride": "weights needs a unit last stride; got 2",
    "table_narrow": "block_tables.shape[1] must be >= 16; got [2, 15]",
    "table_rows": "block_tables.shape[0] must be >= 2; got [1, 16]",
    "gather_table_rows": "block_tables.shape[0] must be >= 3; got [2, 16]",
    "out_short": "out.shape[0] must be >= 3; got [2, 1000]",
    "out_narrow": "out.shape[1] must be >= 1000; got [3, 999]",
    "out_overlap": "out rows overlap: row stride 500 < 1000 columns",
    "out_dtype": "out must be float32, bfloat16 or float16; got int32",
    "valid_bf16": "",
    "valid_f16_starts": "",
    "row_starts_dtype": "row_starts must be int32; got int64",
    "row_starts_rows": "row_starts.shape[0] must be 3; got [2]",
    "row_starts_device": "row_starts is on GPU 1; every tensor must be on GPU 0",
    "flat_offsets_short": "out_offsets.shape[0] must be >= 3; got [2]",
    "flat_out_2d": "out must be 1-D; got 2-D [3, 1000]",
    "grid_zero": "grid must have >= 1 programs; got 0",
    "prefill_cover": "prefill grid of 2 row groups x 1 rows cannot cover 3 rows",
    "prefill_parts": "prefill parts must be >= 1; got 0",
    "table_no_records": "Table mode needs the schedule records; got none",
    "table_short_records": "records.shape[0] must be >= 8; got [7, 8]",
    "table_records_ok": "",
    "device": "kv_cache is on GPU 1; every tensor must be on GPU 0",
    "host_tensor": "row_ends is on the host; every tensor must be on GPU 0",
    "misaligned_kv": "kv_cache is read in 16-byte words, so its data must be 16-byte aligned",
    "misaligned_q": "q is read in 16-byte words, so its data must be 16-byte aligned",
    "mode": "unknown mode 7",
    "ppb": "pages_per_block must be >= 1; got 0",
}


@needs_cxx
def test_launcher_rejects_every_mismatch_before_a_launch():
    got = dict(line.split("\t", 1) for line in run_host("checks").splitlines())
    for name, want in CHECK_MESSAGES.items():
        assert (got[name] == "") if want == "" else (want in got[name]), (name, got[name])
    assert set(got) == set(CHECK_MESSAGES) | {f"{n}_args" for n in CHECK_MESSAGES if n.startswith("valid")}
    # what a valid call hands the kernels: keys capped by max_seq_len, the out width and the table span;
    # the out's kind (args.h OutKind) and whether windows have starts
    assert got["valid_args"] == ("key_cap=1000 out_cols=1000 bt_cols=16 num_rows=3 num_seqs=2 page_shift=6 "
                                 "stride_out=1000 weights_bf16=1 out_kind=0 row_starts=0")
    assert got["valid_wide_args"] == ("key_cap=1000 out_cols=2000 bt_cols=40 num_rows=3 num_seqs=2 page_shift=6 "
                                      "stride_out=2000 weights_bf16=1 out_kind=0 row_starts=0")
    assert got["valid_bf16_args"].endswith(f"out_kind={OUT_CODES['bf16']} row_starts=0")
    assert got["valid_f16_starts_args"].endswith(f"out_kind={OUT_CODES['f16']} row_starts=1")


# ---------------------------------------------------------------------------------------------
# JIT: cache key, forbidden builds, capture, the lock-and-rename path


def test_cache_key_hashes_sources_and_flags(monkeypatch, tmp_path):
    jit.cache_key.cache_clear()
    key = jit.cache_key("cuda")
    assert key == jit.cache_key("cuda") and key != jit.cache_key("hip")
    copy = tmp_path / "csrc"
    shutil.copytree(jit.CSRC, copy)
    (copy / "kernels.cu").write_text((copy / "kernels.cu").read_text() + "\n// changed\n")
    monkeypatch.setattr(jit, "CSRC", copy)
    jit.cache_key.cache_clear()
    assert jit.cache_key("cuda") != key
    jit.cache_key.cache_clear()


def test_cuda_build_compiles_kernels_cu_as_its_shards(tmp_path):
    """A CUDA build's sources: kernels.cu (shard 0) and one file for each other shard, each naming
    its shard before including kernels.cu, all under -DOPUS_SHARDS (the compile check above
    compiles the shards these name); a HIP build compiles kernels.cu alone."""
    files = jit.shard_sources("cuda", tmp_path)
    assert [f.name for f in files] == [f"kernels_shard{k}.cu" for k in range(1, jit.CUDA_SHARDS)]
    for k, f in enumerate(files, start=1):
        assert f.read_text() == f'#define OPUS_SHARD {k}\n#include "kernels.cu"\n'
    assert f"-DOPUS_SHARDS={jit.CUDA_SHARDS}" in jit.flags("cuda")["extra_cuda_cflags"]
    assert jit.shard_sources("hip", tmp_path / "hip") == []
    assert not [f for f in jit.flags("hip")["extra_cuda_cflags"] if "OPUS_SHARD" in f]


@pytest.mark.parametrize("gcn, want", [("gfx942:sramecc+:xnack-", "gfx942"), ("gfx950", "gfx950"),
                                        ("gfx90a:sramecc+:xnack-", None)])
def test_hip_build_targets_the_visible_device(monkeypatch, gcn, want):
    """ROCm: the build's target is GPU 0's arch (features stripped) when csrc/ has a body for it;
    -DOPUS_GFX picks that body (kernels.cu) and the cache key is per arch."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(gcnArchName=gcn))
    jit.cache_key.cache_clear()
    try:
        assert jit.target("hip") == want and jit.target("cuda") == "sm_90"
        cuda_flags = jit.flags("hip")["extra_cuda_cflags"]
        if want:
            assert f"--offload-arch={want}" in cuda_flags and f"-DOPUS_GFX={want[3:]}" in cuda_flags
        else:
            assert not [f for f in cuda_flags if "gfx" in f or "OPUS_GFX" in f]
            monkeypatch.setattr(jit, "platform", lambda: "hip")
            monkeypatch.setattr(jit, "_loaded", None)
            assert BACKEND.available() == mx_reason("device", "the opus HIP kernels build for gfx942, gfx950; "
                                                              "the visible GPU is gfx90a")
            with pytest.raises(jit.BuildError, match="the visible GPU is gfx90a"):
                jit.load()
        key = jit.cache_key("hip")
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(gcnArchName="gfx950"))
        jit.cache_key.cache_clear()
        assert (jit.cache_key("hip") == key) == (want == "gfx950")
    finally:
        jit.cache_key.cache_clear()


def mx_reason(check, message):
    from mqa_logits_mxfp4.core.instance import Reason
    return Reason(check, message)


@pytest.fixture
def pretend_gpu(monkeypatch, tmp_path):
    """A CUDA torch with a visible GPU and an empty cache, as far as the opus backend can tell."""
    monkeypatch.setattr(jit, "platform", lambda: "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(jit, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(jit, "_loaded", None)
    jit.cache_key.cache_clear()
    yield monkeypatch
    jit.cache_key.cache_clear()


def test_forbidden_build_is_a_reason_and_an_error(pretend_gpu):
    pretend_gpu.setattr(jit, "BUILD_ALLOWED", False)
    reason = BACKEND.available()
    assert reason.check == "build" and "forbidden" in reason.message
    with pytest.raises(jit.BuildForbidden, match="building the opus extension is forbidden"):
        jit.load()


def test_env_var_forbids_building(pretend_gpu):
    pretend_gpu.setenv("MQA_LOGITS_MXFP4_OPUS_BUILD", "0")
    mx.reload()
    try:
        reason = BACKEND.available()
        assert reason.check == "build" and "MQA_LOGITS_MXFP4_OPUS_BUILD=0" in reason.message
        with pytest.raises(jit.BuildForbidden, match="MQA_LOGITS_MXFP4_OPUS_BUILD=0"):
            jit.load()
    finally:
        pretend_gpu.delenv("MQA_LOGITS_MXFP4_OPUS_BUILD")
        mx.reload()
    assert BACKEND.available() is None or BACKEND.available().check != "build"


def test_unbuilt_module_under_capture_says_warm_up(pretend_gpu):
    pretend_gpu.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(mx.CaptureError, match="warm up before capture"):
        jit.load()


def test_build_lands_in_the_cache_by_rename_and_is_found_again(pretend_gpu):
    """The build path with cpp_extension.load stubbed: private folder, lock, rename, reuse."""
    from torch.utils import cpp_extension
    built = []

    def fake_load(name, sources, build_directory, **kw):
        assert all(Path(s).is_relative_to(build_directory) for s in sources)  # a snapshot was compiled
        assert (jit.cache_root() / f"{jit.cache_key('cuda')}.lock").exists()    # under the lock
        Path(build_directory, name + ".so").write_bytes(b"not a real module")
        built.append(name)
        return SimpleNamespace(__name__=name)

    pretend_gpu.setattr(cpp_extension, "load", fake_load)
    module = jit.load()
    key = jit.cache_key("cuda")
    assert built == [jit.module_name(key)] and module.__name__ == built[0]
    assert jit.cached_module_path("cuda") == jit.cache_root() / key / f"{built[0]}.so"
    assert not list(jit.cache_root().glob(".build-*"))   # the private folder is gone
    assert BACKEND.available() is None                   # cached: no compiler needed any more
    pretend_gpu.setattr(jit, "_loaded", None)
    pretend_gpu.setattr(jit, "_import", lambda path, name: ("imported", path.name))
    assert jit.load() == ("imported", f"{built[0]}.so") and len(built) == 1   # found, not rebuilt


# ---------------------------------------------------------------------------------------------
# compile checks: sm_90 (nvcc), gfx942 and gfx950 (clang-22), the bindings (g++ against torch headers)


@functools.cache
def compiled() -> dict:
    """The four compiles, two at a time (CI has two cores): nvcc on one, the rest on the other."""
    work = Path(tempfile.mkdtemp(prefix="opus-compile-"))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        sm90 = pool.submit(cc.compile_sm90, work)
        amd = pool.submit(lambda: (cc.compile_gfx("gfx942", work), cc.compile_gfx("gfx950", work),
                                   cc.compile_bindings(work)))
        gfx942, gfx950, bindings = amd.result()
        return {"sm90": sm90.result(), "gfx942": gfx942, "gfx950": gfx950, "bindings": bindings}


def expected_kernels(arch: str) -> set[tuple]:
    return {(i.family, i.rows, h, i.warps, opus_instances.ctas_for_heads(i.ctas_per_sm, h))
            for i in INSTANCES if i.arches == (arch,) for h in i.heads}


def test_loop_local_counts_natural_loops_not_address_ranges():
    """The compile check's local-memory count follows the control flow. An LDL laid out between
    a loop's first and last instruction that the loop never runs is not counted (another role's
    code, as ptxas may place it); one on the loop's path placed after its backward branch is."""
    inside_range_not_loop = """
        /*0000*/                   IGMMA.64x64x32.S8.S8 R24, R8, gdesc[UR4], R24 ;
        /*0010*/                   BRA 0x40 ;
        /*0020*/                   LDL R3, [R1] ;
        /*0030*/                   EXIT ;
        /*0040*/               @P1 BRA 0x0 ;
        /*0050*/                   EXIT ;
    """
    assert cc._local_in_loops(inside_range_not_loop, ("IGMMA",)) == 0
    loop_path_after_branch = """
        /*0000*/                   IGMMA.64x64x32.S8.S8 R24, R8, gdesc[UR4], R24 ;
        /*0010*/               @P0 BRA 0x50 ;
        /*0020*/                   ISETP.NE.AND P1, PT, R2, RZ, PT ;
        /*0030*/               @P1 BRA 0x0 ;
        /*0040*/                   EXIT ;
        /*0050*/                   LDL R3, [R1] ;
        /*0060*/                   STL [R1+0x4], R3 ;
        /*0070*/                   BRA 0x20 ;
    """
    assert cc._local_in_loops(loop_path_after_branch, ("IGMMA",)) == 2
    assert cc._local_in_loops(loop_path_after_branch, ("EXIT",)) == 0  # a mark in no loop counts nothing


def test_sm90_kernels_compile_without_spills_on_their_mma():
    rec = compiled()["sm90"]
    if "skipped" in rec:
        pytest.skip(rec["skipped"])
    assert rec["returncode"] == 0 and "error" not in rec["stderr"].lower(), rec["stderr"]
    kernels = rec["kernels"].values()
    assert {(k["family"], k["rows"], k["heads"], k["warps"], k["ctas"]) for k in kernels} == expected_kernels("sm_90")
    # a Prefill launch's own form (I8Shape::PREFILL_WHOLE): the fused i8 and i8c bodies whose
    # stage runs as rolled spans in decode (four chunks of whole rows) at 64 heads, and only those
    # (and i8w's kernel, that form under a name of its own)
    assert sorted((k["family"], k["rows"], k["heads"], k["warps"]) for k in kernels if k["whole"]) == [
        ("i8", 4, 64, 12), ("i8c", 4, 64, 12), ("i8w", 4, 64, 12)]
    # the op's build: each kernel in one shard of kernels.cu, every shard with some (kernels.cu's in_this_shard)
    assert rec["in_several_shards"] == [] and {k["shard"] for k in kernels} == set(range(rec["shards"]))
    for k in kernels:
        what = f"{k['family']} r{k['rows']} H{k['heads']} w{k['warps']}" + (" (Prefill form)" if k.get("whole") else "")
        assert k["registers"] * k["warps"] * 32 * k["ctas"] <= 65536, f"{what}: launch bounds not met"
        if k["family"] in opus_instances.I8_FAMILIES:
            check_i8_kernel(k, what)
            continue
        # fold r1 H64 keeps a few words of per-piece state in local memory at the 4-CTA budget;
        # nothing may spill inside the tile loop (below), and nothing more than that anywhere
        assert k["spill_stores"] <= 32 and k["stack"] <= 32, what
        if "mma" not in k:
            continue  # no cuobjdump here
        assert k["loop_local"] == 0, f"{what}: local memory inside the tile loop"
        # sm_90 has no native FP8 mma.sync: f16 runs HMMA.16816 directly, fp8 through F2FP + HMMA
        assert k["mma"] == ["HMMA.16816.F32"], what
        assert (k["f2fp"] > 0) == (k["family"] == "fp8"), what
        # peeled first block + the rolled loop of the other three: 2 copies x n-tiles x m-tiles x MMAs
        # (fold: three paths -- folded tiles, fallback tiles of a folding group, of another group
        # -- each at least those 2 copies; ptxas may duplicate one more block)
        per_block = (k["heads"] // 8) * (4 // k["warps"]) * 2
        if k["family"] == "fold":
            assert k["hmma"] % per_block == 0 and k["hmma"] >= 3 * 2 * per_block, what
        else:
            assert k["hmma"] == 2 * per_block, what


# Local-memory instructions allowed in the consumers' stage loops (both copies), by (family, rows,
# heads, warps, Prefill form), where the default bound of 1 is measured to cost less than what it
# buys. r2w16 buys warps with them (48 when loops were read as address ranges, 50 as the natural
# loops they are -- the same binary, two more of its accesses counted:
# opus_compile_check._local_in_loops). Since the set-up's column form (kernel_sm90_i8.cuh,
# COL_SETUP; fifty-second session) ptxas moves a register pair through local memory in i8c's
# r8 H16 body's stage loops (an STL.64 and at once its LDL; i8c's four-row Prefill form had such
# pairs too, until the weights' 16-byte loads, I8Shape::W_VEC, and the fast conversion's tables
# read with the M block's other inputs, block_inputs, took the last of them out: fifty-fourth and
# fifty-sixth sessions); i8c r8 H16 and the narrow consumers were not timed (docs/perf-notes.md).
I8_STAGE_LOOP_LOCAL = {("i8", 2, 64, 16, False): 50, ("i8c", 8, 16, 12, False): 7}


def check_i8_kernel(k: dict, what: str) -> None:
    """The wgmma body: per-piece state may sit in local memory (the walk across the role split),
    nothing inside the consumers' stage loop nor the producer's; INT8 wgmma of 64 x min(rows x
    heads, 64) x 32 with A from registers (w20: the fast path's four k-slices with A from shared
    memory): on the fast path u8 keys (biased) against s8 queries, the bias slice and four
    k-slices a chunk (I8Consumer::KEY_SIGNED's bodies: s8 keys, four k-slices, and no bias slice
    built in the set-up); on the canonical path s8 keys, four k-slices a chunk and scale block (w20: one)."""
    # w16: the producer warpgroup keeps 24 registers, and the walk's state outside its stage
    # loop goes to local memory
    # i8u and i8uc r8: the union's per-piece state (its list windows and piece bounds) beside r8's;
    # none of it inside a stage loop (loop_local below)
    stack = 192 if k["family"] in ("i8u", "i8uc") and k["rows"] == 8 else 64 if k["warps"] <= 12 else 160
    assert k["stack"] <= stack, f"{what}: {k['stack']} bytes of stack"
    if "mma" not in k:
        return  # no cuobjdump here
    # (at most one load a stage: the narrow-out consumer of r4 H32 reloads a per-piece value from
    # local memory at each stage's start; the float32 consumers have none). r2 H64 w16, a
    # measured exception (I8_STAGE_LOOP_LOCAL): its 160 registers a consumer thread hold a stage's two accumulators
    # and operands but not the loop's own state, ~20 local-memory instructions a stage in each
    # consumer (L1 hits, of ~1340), and it is still 4-7% faster than r2w12 (docs/perf-notes.md)
    bound = I8_STAGE_LOOP_LOCAL.get((k["family"], k["rows"], k["heads"], k["warps"], k["whole"]), 1)
    assert k["loop_local"] <= bound, f"{what}: local memory inside the consumers' stage loop"
    assert k["producer_loop_local"] == 0, f"{what}: local memory inside the producer's stage loop"
    nc = min(k["rows"] * k["heads"], 64)
    chunks = k["rows"] * k["heads"] // nc
    # signed keys on the fast path, no bias slice, where one conversion feeds four 64-column
    # chunks, and at two chunks but in the fused table bodies whose chunk holds several rows
    # (kernel_sm90_i8.cuh, I8Consumer::KEY_SIGNED; docs/perf-notes.md, forty-third, forty-fourth
    # and forty-sixth sessions)
    key_signed = chunks >= 4 or (chunks == 2 and (k["family"] != "i8" or k["heads"] >= nc))
    # nothing else: a dummy HGMMA.64x8x16 that ptxas inserted under register pressure went with
    # wrong fast-path sums on the H200 (docs/perf-notes.md)
    gmma = [f"IGMMA.64x{nc}x32.S8.S8"] + ([] if key_signed else [f"IGMMA.64x{nc}x32.U8.S8"])
    assert k["gmma"] == gmma, (what, k["gmma"])
    # the fast path unrolled over a span of M blocks x chunks, 5 wgmma each (4 with signed
    # keys) -- two M blocks (a rolled loop of spans) where a stage has four or more chunks of
    # whole rows, else (and in a Prefill form) a stage's M blocks (OPUS_I8_STAGE_KEYS / 64;
    # I8Shape::FAST_SPAN, PREFILL_WHOLE); the canonical path one rolled M block: chunks x 4 scale
    # blocks x 4 k-slices (w20, the split body: one k-slice a scale block); twice: one consumer
    # for a float32 out, one for a narrow out
    span = 2 if chunks >= 4 and k["heads"] <= nc and not k["whole"] else opus_instances.I8_STAGE_KEYS // 64
    slices = 1 if k["warps"] == 20 else 4
    assert k["igmma"] == 2 * (span * chunks * (4 if key_signed else 5) + chunks * 4 * slices), (what, k["igmma"])
    # the set-up's column sums (dp4a) feed only the bias slice: none where the keys are signed,
    # some wherever the slice is built (kernel_sm90_i8.cuh, setup_turns; docs/perf-notes.md,
    # forty-fourth session)
    assert (k["idp"] == 0) == key_signed, (what, k["idp"])


def test_gfx950_kernels_compile_to_the_scaled_mfma():
    rec = compiled()["gfx950"]
    if "skipped" in rec:
        pytest.skip(rec["skipped"])
    assert rec["returncode"] == 0 and "error" not in rec["stderr"].lower(), rec["stderr"]
    assert rec["target"].endswith("gfx950")
    kernels = rec["kernels"].values()
    assert {(k["family"], k["rows"], k["heads"], k["waves"], k["ctas"]) for k in kernels} == expected_kernels("gfx950")
    for k in kernels:
        what = f"{k['family']} r{k['rows']} H{k['heads']}"
        mt = -(-k["heads"] // 32)  # 32-column M-tiles a row
        if k["family"] == "mxf4":
            # one scaled MFMA per (scale block, M-tile) of a row, unit hardware scales: docs/numerics.md step 3 stays ours
            assert k["mfma_ops"] == {"v_mfma_scale_f32_32x32x64_f8f6f4": 4 * mt}, what
            assert k["real_scales"] == 0, what
            assert_clean_gfx9(k, what)
        else:
            # mxsc: two MFMAs an M-tile over the whole head_dim, the real block scales in registers
            # (half the MFMAs of mxf4's four a tile, every K lane useful), plus mxf4's four for the
            # canonical fallback
            assert k["family"] == "mxsc", what
            assert k["mfma_ops"] == {"v_mfma_scale_f32_32x32x64_f8f6f4": 2 * mt + 4 * mt}, what
            assert k["real_scales"] == 2 * mt, what
            # the second path's uniform state spills SGPRs to VGPR lanes (no memory: no VGPR
            # spill, no scratch): written once a piece, read back at most MAX_TILE_LANE_OPS times a tile at r >= 2
            # (v_readlane), against a tile's 6 x M-tiles x rows MFMAs
            assert k["tile_loop_lane_ops"] <= (0 if k["rows"] == 1 else MAX_TILE_LANE_OPS), what
            assert_clean_gfx9(k, what, sgpr_spills=24)


# The gfx9 full paths at r >= 2: SGPRs spilled to VGPR lanes and read back inside the tile loop
# (v_readlane / v_writelane, no memory). 5 until the window starts and the out kinds (issue 15)
# added uniform state: up to 12 now (r4 / r8 of mxsc), a few VALU operations a tile.
MAX_TILE_LANE_OPS = 12


def assert_clean_gfx9(k: dict, what: str, sgpr_spills: int = 12) -> None:  # 8 before the same issue-15 state
    assert (k["vgpr_spill"], k["scratch"], k["calls"]) == (0, 0, 0), what
    assert k["sgpr_spill"] <= sgpr_spills, f"{what}: SGPR spills (to VGPR lanes) grew to {k['sgpr_spill']}"
    assert k["vgpr"] <= 256 and k["lds"] <= 64 * 1024, what


def test_gfx942_kernels_compile_to_their_mfma():
    rec = compiled()["gfx942"]
    if "skipped" in rec:
        pytest.skip(rec["skipped"])
    assert rec["returncode"] == 0 and "error" not in rec["stderr"].lower(), rec["stderr"]
    assert rec["target"].endswith("gfx942")
    kernels = rec["kernels"].values()
    assert {(k["family"], k["rows"], k["heads"], k["waves"], k["ctas"]) for k in kernels} == expected_kernels("gfx942")
    for k in kernels:
        what = f"{k['family']} r{k['rows']} H{k['heads']}"
        if k["family"] == "fp8fold":
            # fp8's four MFMAs a (row, M-tile) on the fallback, four more chained on folded operands;
            # both query operands in LDS; a few SGPRs spill to VGPR lanes, reloaded <= MAX_TILE_LANE_OPS times a tile
            assert k["mfma_ops"] == {"v_mfma_f32_16x16x32_fp8_fp8": 2 * 4 * k["heads"] // 16}, what
            assert 256 * k["rows"] * k["heads"] < k["lds"] <= 292 * k["rows"] * k["heads"] + 128, what
            assert k["tile_loop_lane_ops"] <= (0 if k["rows"] == 1 else MAX_TILE_LANE_OPS), what
            assert_clean_gfx9(k, what, sgpr_spills=24)
            continue
        assert_clean_gfx9(k, what)
        if k["family"] == "f16":
            # two FP16 MFMAs per (scale block, 16-column M-tile) of a row, and no other MFMA
            assert k["mfma_ops"] == {"v_mfma_f32_16x16x16_f16": 2 * 4 * k["heads"] // 16}, what
            # the group's FP16 query operands (256 B a row and head), scales and weights; 64 KB a CU
            assert 256 * k["rows"] * k["heads"] < k["lds"] <= 276 * k["rows"] * k["heads"] + 128, what
        else:
            # fp8: one FNUZ FP8 MFMA per (scale block, M-tile), half f16's; FP8 query operands
            # (128 B a row and head)
            assert k["family"] == "fp8", what
            assert k["mfma_ops"] == {"v_mfma_f32_16x16x32_fp8_fp8": 4 * k["heads"] // 16}, what
            assert 128 * k["rows"] * k["heads"] < k["lds"] <= 148 * k["rows"] * k["heads"] + 128, what


def test_bindings_compile_against_the_installed_torch():
    rec = compiled()["bindings"]
    if "skipped" in rec:
        pytest.skip(rec["skipped"])
    assert rec["launch"]["returncode"] == 0, rec["launch"]["stderr"]
    assert rec["bindings"]["returncode"] == 0, rec["bindings"]["stderr"]


def test_kernel_sources_are_torch_free():
    for p in cc.CSRC.iterdir():
        if p.name != "bindings.cpp":
            assert "torch" not in re.sub(r"//.*", "", p.read_text()).lower().replace("torch-free", ""), p.name
