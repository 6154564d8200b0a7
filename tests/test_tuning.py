"""The tuner, its suites, shards, merges, --verify and the bench (tuning/).

Kernels run on the CPU through the Triton interpreter; the timer is injected (a fake one that
returns set values per candidate label), except in one case that times for real (wall clock).
"""

import math
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.dispatch import registry, table
from mqa_logits_mxfp4.dispatch.checks import check_inputs
from mqa_logits_mxfp4.core.errors import TableError
from mqa_logits_mxfp4.dispatch.config import make_config
from mqa_logits_mxfp4.dispatch.table import COLUMNS
from mqa_logits_mxfp4.problems import make_problem
from mqa_logits_mxfp4.reference import mqa_logits_reference
from mqa_logits_mxfp4.tuning import bench, report, suites, tables, tuner
from mqa_logits_mxfp4.tuning.commands import _parser, main

from helpers import tuned_row as row, write_csv

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
needs_kernels = pytest.mark.skipif(not INTERPRETING, reason="CPU kernels need TRITON_INTERPRET=1")
CPU = torch.device("cpu")
INSTANCE = "fp8_r1n64w4s2"  # one-row: serves the smoke suite's gather shape too
SMOKE = suites.SUITES["smoke"].shapes()
TRITON = registry.get("triton")


pytestmark = pytest.mark.usefixtures("isolated_dispatch")  # tests/conftest.py


class FakeTimer:
    """times[label] microseconds for every sample (default for labels not given); never calls fn."""

    def __init__(self, times=None, default=100.0):
        self.times, self.default, self.calls = dict(times or {}), default, []

    def __call__(self, fn, label, iters, warmup):
        self.calls.append(label)
        return [float(self.times.get(label, self.default))] * iters


class Broken:
    """The Triton backend under another name, with every output spoilt after the launch."""

    def __init__(self, how: str):
        self.name, self.how = f"broken_{how}", how

    def __getattr__(self, attr):
        return getattr(TRITON, attr)

    def launch(self, cfg, mode, *args):
        TRITON.launch(cfg, mode, *args)
        out, row_ends = args[8], args[7]
        if self.how == "nan":
            out[0, 0] = float("nan")
        else:  # writes the first cell past row 0's window
            out[0, int(row_ends[0])] = 0.0


def make_tuner(timer=None, **kw):
    kw.setdefault("instances", {INSTANCE})
    return tuner.Tuner(CPU, timer=timer or FakeTimer(), iters=3, rounds=2, **kw)


def label(mode, instance=INSTANCE, backend="triton"):
    return f"{backend}/{instance}/{mode}"


# --- suites -------------------------------------------------------------------------------

ALL_SHAPES = [pytest.param(name, quick, id=f"{name}-{'quick' if quick else 'full'}")
              for name in suites.SUITES for quick in (False, True)]


@pytest.mark.parametrize("name, quick", ALL_SHAPES)
def test_suite_names_and_buckets_unique(name, quick):
    shapes = suites.SUITES[name].shapes(quick)
    assert shapes
    names = [s.name for s in shapes]
    assert len(set(names)) == len(names)
    buckets = [table.bucket(s.key(CPU, arch="sm_90", cu_num=132)) for s in shapes]
    assert len(set(buckets)) == len(buckets)
    assert all(b[:2] == ("sm_90", 132) for b in buckets)


@pytest.mark.parametrize("name", list(suites.SUITES))
def test_suite_bounds_cover_each_shape(name):
    full = suites.SUITES[name].shapes()
    assert {s.name for s in suites.SUITES[name].shapes(True)} <= {s.name for s in full}
    for s in full:
        ends = s.row_ends()
        span = s.page_size * s.pages_per_block
        assert len(ends) == s.max_rows == sum(r for _, r in s.seqs), s.name
        assert len(s.seqs) == s.max_seqs and max(r for _, r in s.seqs) == s.max_qlen, s.name
        assert max(ends) <= s.max_seq_len, s.name
        assert s.max_seq_len % span == 0 or s.gather and s.max_seq_len == suites.CANDIDATE_KEYS, s.name
        # make_problem's table is exactly as wide as the config asks
        assert math.ceil(max(ends) / span) + s.table_pad == s.key(CPU).block_table_width, s.name
        assert all(0 <= r <= ctx for ctx, r in s.seqs) and s.layers >= 1


def test_suites_cover_the_models():
    v4 = suites.SUITES["deepseek_v4"].shapes()
    decode = [s for s in v4 if s.kind == "decode"]
    assert {s.max_qlen for s in decode} == {1, 2, 4}
    assert {s.max_seqs for s in decode} == set(suites.BATCHES)
    assert {(s.heads, s.page_size, s.pages_per_block, s.gather, s.ratio, s.layers) for s in v4} == \
        {(64, 64, 1, False, 4, 30)}
    for s in decode:  # ragged contexts in [0.7, 1.3] x the average named
        avg = int(s.name.split("ctx")[1][:-1]) * 1024
        assert all(0.7 * avg - 1 <= c <= 1.3 * avg for c, _ in s.seqs), s.name
    assert max(int(s.name.split("ctx")[1][:-1]) for s in decode) == 512
    prefill = [s for s in v4 if s.kind == "prefill"]
    assert prefill and all(s.max_rows == 16384 for s in prefill)
    assert {s.max_seq_len for s in prefill} >= {4096, 65536}  # fresh 16K and a chunk at 256K (ratio 4)

    v41 = suites.SUITES["deepseek_v4_1"].shapes()
    full = [s for s in v41 if not s.gather]
    assert {(s.heads, s.page_size, s.pages_per_block, s.layers) for s in full} == {(32, 8, 32, 3)}
    assert {s.ratio for s in full} == {1, 2}
    assert {s.max_qlen for s in full if s.kind == "decode"} == {1, 2, 4, 8}
    cand = [s for s in v41 if s.gather]
    assert {(s.heads, s.page_size, s.pages_per_block, s.layers) for s in cand} == {(32, 8, 1, 4)}
    assert max(s.max_seq_len for s in cand) == 16384 == 2048 * 8
    assert all(max(s.row_ends()) <= 16384 for s in cand)


@pytest.mark.parametrize("name", ["deepseek_v4", "deepseek_v4_1", "smoke"])
def test_small_suite_shapes_build_problems_the_config_accepts(name):
    shapes = sorted(suites.SUITES[name].shapes(), key=lambda s: sum(s.row_ends()))
    picks = [shapes[0]] + [s for s in shapes if s.gather][:1]
    for s in picks:
        p = s.make(CPU)
        assert p.row_ends.tolist() == s.row_ends()
        assert p.max_seq_len <= s.max_seq_len and p.max_qlen == s.max_qlen and p.num_seqs == s.max_seqs
        assert torch.equal(s.make(CPU).kv_cache, p.kv_cache)  # seeded by the name
        inst = next(i for i in TRITON.instances() if i.name == INSTANCE)
        cfg = make_config(s.key(CPU), TRITON, inst, "free", "test")
        out = torch.empty((p.rows, s.max_seq_len))
        check_inputs(cfg, *p.args(), out, None)


def test_shape_for_key_finds_suite_shapes_and_makes_up_others():
    s = suites.SUITES["deepseek_v4_1"].shapes(True)[3]
    key = table.bucket(s.key(CPU, arch="sm_90", cu_num=132))
    assert suites.shape_for_key(key) == s
    key = ("sm_90", 132, 64, 128, 64, 1, False, False, 3, 10, 1000)
    made = suites.shape_for_key(key)
    assert table.bucket(made.key(CPU, arch="sm_90", cu_num=132)) == key
    assert max(made.row_ends()) <= 1000 and made.layers == suites.V4_LAYERS


# --- shards and merges ------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_partition_deterministically(count):
    shapes = suites.SUITES["deepseek_v4"].shapes()
    parts = [suites.shard(shapes, i, count) for i in range(count)]
    assert parts == [suites.shard(shapes, i, count) for i in range(count)]
    names = [s.name for part in parts for s in part]
    assert sorted(names) == sorted(s.name for s in shapes) and len(set(names)) == len(names)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    # nested: a shard of a shard (workers inside a Slurm task) still partitions
    nested = [s.name for i in range(count) for g in range(2) for s in suites.shard(parts[i], g, 2)]
    assert sorted(nested) == sorted(names)


def test_parse_shard():
    assert suites.parse_shard("2/5") == (2, 5)
    for bad in ("5/5", "-1/3", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match="I/N"):
            suites.parse_shard(bad)






def test_merge_collision_names_both_files(tmp_path):
    a = write_csv(tmp_path / "a.csv", [row(), row(rows=32)])
    b = write_csv(tmp_path / "b.csv", [row(rows=64), row(rows=32, us=9.0)])
    with pytest.raises(TableError) as e:
        tables.merge_tables([a, b], tmp_path / "out.csv")
    assert f"{a}:3" in str(e.value) and f"{b}:3" in str(e.value)
    assert not (tmp_path / "out.csv").exists()


def test_merge_writes_sorted_rows_and_refuses_to_overwrite(tmp_path):
    a = write_csv(tmp_path / "a.csv", [row(rows=64), row(seq_len=4096)])
    b = write_csv(tmp_path / "b.csv", [row(rows=32)])
    out = tmp_path / "out.csv"
    assert tables.merge_tables([a, b], out) == 3
    keys = [r.key for r in table.read_table(out)]
    assert keys == sorted(keys) and len(keys) == 3
    with open(out) as f:
        assert f.readline().strip().split(",") == list(COLUMNS)
    with pytest.raises(TableError, match="exists and is not an input"):
        tables.merge_tables([a], out)
    c = write_csv(tmp_path / "c.csv", [row(rows=8)])
    assert tables.merge_tables([out, c], out) == 4  # merging into an input is allowed


def test_merge_command(tmp_path):
    a = write_csv(tmp_path / "a.csv", [row()])
    b = write_csv(tmp_path / "b.csv", [row()])
    args = _parser().parse_args(["tune", "merge", str(a), str(b), "-o", str(tmp_path / "o.csv")])
    assert args.handler(args, args.subparser) == 1
    b = write_csv(tmp_path / "b.csv", [row(rows=2)])
    assert args.handler(args, args.subparser) == 0
    assert len(table.read_table(tmp_path / "o.csv")) == 2


# --- the tuner ------------------------------------------------------------------------------

@needs_kernels
def test_tuner_writes_a_table_the_dispatcher_finds(tmp_path, monkeypatch):
    shape = SMOKE[0]
    timer = FakeTimer({label("free"): 50, label("prefill"): 60, label("table"): 40,
                       label("table") + ":schedule": 300, "torch": 7000})
    out = tmp_path / "model.csv"
    summary = tuner.tune([shape], out, make_tuner(timer))
    assert summary.tuned == [shape.name] and not summary.failed
    with open(out) as f:
        assert f.readline().strip().split(",") == list(COLUMNS)
    got, invariant = table.read_table(out)  # a row for each batch_invariant setting, 0 first
    # table: 40 + 300 / 3 layers = 140 us loses to free at 50 us; the instance is canonical
    for r in (got, invariant):
        assert (r.backend, r.instance, r.mode, r.us) == ("triton", INSTANCE, "free", 50.0)
    assert got.key == table.bucket(shape.key(CPU))
    assert invariant.key == table.bucket(replace(shape.key(CPU), batch_invariant=True))
    for rec in tables.read_records(out):
        assert float(rec["ref_us"]) == 7000 and rec["candidates"] == "3" and rec["device_name"]
        assert rec["torch_version"] == torch.__version__ and rec["schema_version"] == "2"

    key = shape.key(CPU)
    assert table.lookup(key, (str(out),)).source == f"{out}:2"
    assert table.lookup(replace(key, batch_invariant=True), (str(out),)).source == f"{out}:3"
    bigger = suites.shape_for_key(("cpu", 1, 32, 128, 8, 1, False, False, 4, 64, 4096)).key(CPU)
    assert table.lookup(bigger, (str(out),)).key == got.key  # nearest tuned bounds below
    monkeypatch.setenv("MQA_LOGITS_MXFP4_CONFIGS", str(out))
    mx.reload()
    cfg = mx.mqa_logits_mxfp4_config("cpu", **shape.bounds())
    assert cfg.source.startswith(f"tuned row {out}:2") and (cfg.instance, cfg.mode) == (INSTANCE, "free")
    cfg = mx.mqa_logits_mxfp4_config("cpu", **shape.bounds(), batch_invariant=True)
    assert cfg.source.startswith(f"tuned row {out}:3") and (cfg.instance, cfg.mode) == (INSTANCE, "free")

    # resumable: a second run finds the key and times nothing
    again = FakeTimer()
    summary = tuner.tune([shape], out, make_tuner(again))
    assert summary.already == [shape.name] and again.calls == []
    assert len(table.read_table(out)) == 2


@needs_kernels
def test_a_shape_that_fails_is_reported_and_the_run_goes_on(tmp_path, caplog):
    bad = replace(SMOKE[0], name="bad", seqs=((2, 5),))  # more rows than context: make_problem refuses
    with caplog.at_level("ERROR", logger="mqa_logits_mxfp4.tuning"):
        summary = tuner.tune([bad, SMOKE[1]], tmp_path / "t.csv", make_tuner(modes={"free"}))
    assert summary.failed == ["bad"] and summary.tuned == [SMOKE[1].name]
    assert "bad: not tuned: ValueError" in caplog.text


@needs_kernels
def test_table_mode_is_charged_its_schedule_over_the_layers():
    shape = SMOKE[0]
    timer = FakeTimer({label("free"): 50, label("prefill"): 60, label("table"): 40,
                       label("table") + ":schedule": 24})
    result = make_tuner(timer, modes={"table", "free"}).measure(shape)
    assert result.best.candidate.mode == "table"
    assert result.best.us == pytest.approx(40 + 24 / shape.layers)
    assert result.best.schedule_us == 24
    # the fastest (up to top=3) were re-timed in interleaved rounds
    retimed = [c for c in timer.calls[-8:] if not c.endswith("torch")]
    assert retimed[:3] == [label("table"), label("table") + ":schedule", label("free")]


@needs_kernels
@pytest.mark.parametrize("how", ["nan", "outside"])
def test_a_wrong_candidate_is_rejected_and_never_picked(how, caplog):
    shape = SMOKE[0]
    broken = Broken(how)
    timer = FakeTimer({label(m, backend=broken.name): 1 for m in ("table", "free", "prefill")}, default=50)
    with caplog.at_level("WARNING", logger="mqa_logits_mxfp4.tuning"):
        result = make_tuner(timer, backends=[broken, TRITON]).measure(shape)
    rejected = dict(result.rejected)
    assert set(rejected) == {label(m, backend=broken.name) for m in ("table", "free", "prefill")}
    text = " ".join(sum(rejected.values(), []))
    assert ("NaN cells differ" in text) if how == "nan" else ("outside windows were written" in text)
    assert result.best.candidate.backend is TRITON
    assert not any(broken.name in c for c in timer.calls)  # never timed
    assert f"{broken.name}/{INSTANCE}/free rejected" in caplog.text


@needs_kernels
def test_non_canonical_candidates_are_said_once_a_run(caplog):
    """The Triton scaled family differs bitwise from the canonical order by design: recorded per
    shape, said once a run (not once a candidate and shape); canonical ones must agree. Wide
    scales: on narrow ones the interpreter's scaled path happens to round like the canonical."""
    t = make_tuner(instances={INSTANCE, "scaled_r1n64w4s2"}, modes={"free", "table"}, top=0, torch_path=False,
                   data="wide")
    with caplog.at_level("WARNING", logger="mqa_logits_mxfp4.tuning"):
        results = [t.measure(shape) for shape in SMOKE]
    said = [r.getMessage() for r in caplog.records if "not bitwise identical" in r.getMessage()]
    for result in results:
        assert result.not_identical == [label(m, instance="scaled_r1n64w4s2") for m in ("table", "free")]
        assert {t.candidate.label for t in result.timed} >= set(result.not_identical)  # still timed
    assert len(said) == 1 and "non-canonical" in said[0] and "said once a run" in said[0]


SCALED = "scaled_r1n64w4s2"  # not canonical (docs/numerics.md)


@needs_kernels
def test_tuner_picks_both_settings_from_one_measurement(tmp_path, monkeypatch):
    """Time once, pick twice: the batch_invariant=0 row takes the fastest candidate (here the
    non-canonical scaled one), the batch_invariant=1 row the fastest canonical one."""
    measured = []
    real_measure = tuner.Tuner.measure
    monkeypatch.setattr(tuner.Tuner, "measure", lambda self, shape, *a, **k: measured.append(shape.name)
                        or real_measure(self, shape, *a, **k))
    shape, out = SMOKE[0], tmp_path / "model.csv"
    timer = FakeTimer({label("free", SCALED): 10, label("free"): 50})
    summary = tuner.tune([shape], out, make_tuner(timer, instances={INSTANCE, SCALED}, modes={"free"}))
    assert summary.tuned == [shape.name] and not summary.failed and measured == [shape.name]
    assert [c for c in timer.calls if c != "torch"].count(label("free", SCALED)) == 1 + 2  # probe, 2 rounds
    fastest, canonical = table.read_table(out)
    assert (fastest.instance, fastest.us, fastest.key) == (SCALED, 10.0, table.bucket(shape.key(CPU)))
    assert (canonical.instance, canonical.us) == (INSTANCE, 50.0)
    assert canonical.key == tuner.setting_key(shape.key(CPU), True)
    assert [r["candidates"] for r in tables.read_records(out)] == ["2", "1"]
    monkeypatch.setenv("MQA_LOGITS_MXFP4_CONFIGS", str(out))
    mx.reload()
    assert mx.mqa_logits_mxfp4_config("cpu", **shape.bounds()).instance == SCALED
    assert mx.mqa_logits_mxfp4_config("cpu", **shape.bounds(), batch_invariant=True).instance == INSTANCE


@needs_kernels
def test_canonical_candidates_are_pruned_and_retimed_against_canonical_ones():
    """A canonical candidate 6x slower than a non-canonical one is still timed (it may be the
    batch_invariant pick) and re-timed with the fastest of each setting; a non-canonical one
    that slow is pruned."""
    shape = SMOKE[0]
    key = shape.key(CPU)
    by_name = {c.instance.name: c for c in tuner.candidates(key, instances={INSTANCE, SCALED, "scaled_r1n64w8s2"},
                                                            modes={"free"})[0]}
    cands = [by_name[SCALED], by_name["scaled_r1n64w8s2"], by_name[INSTANCE]]  # the canonical one last
    timer = FakeTimer({label("free", SCALED): 10, label("free", "scaled_r1n64w8s2"): 60, label("free"): 60})
    result = make_tuner(timer, top=1, torch_path=False).measure(shape, cands)
    pruned = {t.candidate.instance.name: t.pruned for t in result.timed}
    assert pruned == {SCALED: False, "scaled_r1n64w8s2": True, INSTANCE: False}
    assert {t.candidate.instance.name for t in result.final} == {SCALED, INSTANCE}
    assert result.best.candidate.instance.name == SCALED == result.best_for(False).candidate.instance.name
    assert result.best_for(True).candidate.instance.name == INSTANCE


@needs_kernels
def test_a_shape_without_a_canonical_candidate_lacks_its_batch_invariant_row(tmp_path, caplog):
    shape, out = SMOKE[0], tmp_path / "t.csv"
    with caplog.at_level("ERROR", logger="mqa_logits_mxfp4.tuning"):
        summary = tuner.tune([shape], out, make_tuner(instances={SCALED}, modes={"free"}, torch_path=False))
    assert summary.tuned == [shape.name] and summary.failed == [f"{shape.name} (batch_invariant=1)"]
    assert "no canonical candidate passed the check: no batch_invariant=1 row" in caplog.text
    (row,) = table.read_table(out)
    assert row.instance == SCALED and row.key == table.bucket(shape.key(CPU))
    # a later run with a canonical candidate adds the missing row only
    timer = FakeTimer()
    summary = tuner.tune([shape], out, make_tuner(timer, modes={"free"}, torch_path=False))
    assert summary.tuned == [shape.name] and not summary.failed
    assert [(r.instance, r.key[table.KEY.index("batch_invariant")]) for r in table.read_table(out)] == \
        [(SCALED, False), (INSTANCE, True)]


@needs_kernels
def test_real_timer_check_and_time_loop(tmp_path):
    """The default timer (wall clock on the CPU) through check, timing and re-timing."""
    t = tuner.Tuner(CPU, instances={INSTANCE}, modes={"free"}, iters=1, rounds=1, torch_path=False)
    summary = tuner.tune(SMOKE[:1], tmp_path / "t.csv", t)
    got, invariant = table.read_table(tmp_path / "t.csv")
    assert summary.tuned and got.us > 0 and got.mode == "free"
    assert (invariant.instance, invariant.us) == (got.instance, got.us)  # one measurement, picked twice


def test_candidates_list_reasons_for_the_rest():
    key = SMOKE[1].key(CPU)  # gather: only one-row instances
    found, skipped = tuner.candidates(key)
    if INTERPRETING:
        assert found and all(c.instance.rows == 1 for c in found)
        assert {c.mode for c in found} == {"table", "free", "prefill"}
        assert any("gather mode needs a one-row instance" in s for s in skipped)
    assert any(s.startswith("opus: ") for s in skipped)


def test_reference_bands_fit_the_budget():
    assert tuner._bands([100] * 10, 1, 10_000) == [(0, 10)]
    bands = tuner._bands([100] * 1000, 1, 10_000)
    assert bands[0][0] == 0 and bands[-1][1] == 1000
    assert sum(b - a for a, b in bands) * 100 <= 10_000 and len(bands) == 4


@needs_kernels
def test_banded_reference_check_catches_errors_in_its_bands():
    shape = suites.shape_for_key(("cpu", 1, 32, 128, 8, 1, False, False, 2, 16, 64))  # 8 sequences x 2 rows
    p = shape.make(CPU)
    check = tuner.ReferenceCheck(p, shape.max_seq_len, budget_macs=1)
    assert check.bands == [(0, 1), (5, 6), (10, 11), (15, 16)]
    inst = next(i for i in TRITON.instances() if i.name == INSTANCE)
    cfg = make_config(shape.key(CPU), TRITON, inst, "free", "test")
    out = torch.full((p.rows, shape.max_seq_len), float("-inf"))
    TRITON.launch(cfg, "free", *p.args(), out, None, None)
    assert check(out) == []
    good = out[15, 0].item()
    out[15, 0] = float("nan")
    assert "rows 15..15: NaN cells differ" in " ".join(check(out))
    out[15, 0] = good
    out[3, 5] += 1e9  # a window cell of a row outside every band: not compared
    assert check(out) == []
    out[2, 63] = 0.0  # but every cell outside windows is, in every row (row 2 sees 63 keys)
    assert "1 cells outside windows were written" in " ".join(check(out))


# --- verify ---------------------------------------------------------------------------------

@needs_kernels
def test_verify_flags_rows_off_by_more_than_ten_percent(tmp_path):
    out = tmp_path / "model.csv"
    tuner.tune(SMOKE, out, make_tuner(FakeTimer({label("free"): 50}, default=80), torch_path=False))
    recs = tables.read_records(out)
    assert [(r["mode"], r["batch_invariant"]) for r in recs] == [("free", "0"), ("free", "1")] * 2
    recs[0]["us"], recs[1]["us"] = "52", "40"  # now 50: -4% (within) and +25% (off)
    recs.append(dict(recs[0], arch="sm_90", cu_num="132"))  # another device's row: skipped
    tables.write_records(out, recs)
    rows, skipped = tuner.verify(out, make_tuner(FakeTimer({label("free"): 50})))
    assert [(v.tuned_us, v.now_us, v.off(0.10)) for v in rows] == [(52, 50, False), (40, 50, True),
                                                                   (50, 50, False), (50, 50, False)]
    assert len(skipped) == 1 and "sm_90/132" in skipped[0]

    recs[0]["instance"] = "no_such_instance"
    recs[1]["instance"] = recs[2]["instance"] = "scaled_r1n64w4s2"  # non-canonical: not in a batch_invariant row
    tables.write_records(out, recs)
    rows, _ = tuner.verify(out, make_tuner(FakeTimer({label("free"): 50})))
    assert "no instance 'no_such_instance'" in rows[0].problem and rows[0].off(0.10)
    assert rows[1].problem == "cannot run here: batch_invariant: scaled_r1n64w4s2 is not canonical (docs/numerics.md)"
    assert not rows[2].problem and rows[2].now_us == 100  # the same pick in a batch_invariant=0 row runs


# --- bench ------------------------------------------------------------------------------------

def test_problem_work_counts_flops_and_fewest_bytes():
    shape = SMOKE[0]
    p = shape.make(CPU)
    work = bench.problem_work(p)
    ends = shape.row_ends()
    assert work["flops"] == 2 * shape.heads * shape.head_dim * sum(ends)
    keys = sum(math.ceil(((ctx) // shape.ratio) / shape.page_size) * shape.page_size for ctx, _ in shape.seqs)
    row_bytes = shape.heads * (64 + 4 + 4)  # q + q_scale + fp32 weights
    assert work["bytes"] == keys * 68 + len(ends) * row_bytes + 4 * sum(ends)
    g = bench.problem_work(SMOKE[1].make(CPU))
    assert g["bytes"] > 4 * sum(SMOKE[1].row_ends())


@needs_kernels
def test_bench_rows_and_plot(tmp_path):
    ceil = {"copy_GBps": 1000.0, "bf16_TFLOPs": 100.0}
    broken = Broken("nan")
    t = make_tuner(FakeTimer({"torch": 1000.0}, default=10.0), backends=[broken, TRITON], top=0,
                   modes={"free", "prefill"})
    rows = bench.bench(SMOKE[:1], t, ceil)
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["backend"] for r in ok} == {"triton", "torch"}
    assert {r["mode"] for r in rows if r["status"] == "rejected"} == {"free", "prefill"}
    work = bench.problem_work(SMOKE[0].make(CPU))
    floor = max(work["bytes"] / 1000.0 / 1e3, work["flops"] / 100.0 / 1e6)
    free = next(r for r in ok if r["mode"] == "free")
    assert float(free["fraction"]) == pytest.approx(floor / 10.0, rel=1e-3)
    assert float(free["GBps"]) == pytest.approx(work["bytes"] / 10.0 / 1e3, rel=1e-3)
    assert free["copy_GBps"] == "1000" and free["fp8_TFLOPs"] == ""
    t = make_tuner(FakeTimer({"torch": 1000.0}, default=10.0), top=0, modes={"free"})
    best = bench.bench(SMOKE[:1], t, ceil, best_only=True)
    assert [r["backend"] for r in best] == ["triton", "torch"]
    path = tmp_path / "b.csv"
    bench.write_csv(path, rows)
    shapes, fractions = report.best_fractions(report.read_csv(path))
    assert shapes == [SMOKE[0].name] and set(fractions) == {"triton", "torch"}
    message = report.plot(report.read_csv(path), tmp_path / "b.png")
    try:
        import matplotlib  # noqa: F401
        assert message.startswith("wrote") and (tmp_path / "b.png").stat().st_size > 1000
    except ImportError:
        assert message.startswith("matplotlib is not installed")


@needs_kernels
def test_bench_batch_invariant_times_canonical_instances_only():
    """bench --batch-invariant: each shape measured as a batch_invariant=True config, so a
    non-canonical instance is skipped by its rule before anything runs, the canonical ones are
    timed, and every row records the setting."""
    ceil = {"copy_GBps": 1000.0, "bf16_TFLOPs": 100.0}
    names = {INSTANCE, "scaled_r1n64w4s2"}
    assert {i.name: i.canonical for i in TRITON.instances() if i.name in names} == {INSTANCE: True,
                                                                                   "scaled_r1n64w4s2": False}
    t = make_tuner(FakeTimer({"torch": 1000.0}, default=10.0), backends=[TRITON], instances=names, top=0,
                   modes={"free"}, torch_path=False, batch_invariant=True)
    result = t.measure(SMOKE[0])
    assert result.key.batch_invariant
    assert [c.candidate.instance.name for c in result.timed] == [INSTANCE]
    assert any("scaled_r1n64w4s2" in s and "batch_invariant" in s for s in result.skipped), result.skipped
    rows = bench.bench(SMOKE[:1], t, ceil)
    assert [r["instance"] for r in rows if r["status"] == "ok"] == [INSTANCE]
    assert {r["batch_invariant"] for r in rows} == {1}
    plain = make_tuner(FakeTimer(default=10.0), backends=[TRITON], instances=names, top=0, modes={"free"},
                       torch_path=False)
    assert {r["batch_invariant"] for r in bench.bench(SMOKE[:1], plain, ceil)} == {0}


def test_bench_peer_rows_and_ratio(monkeypatch):
    """bench(peer="deepgemm"): where the peer serves the problem, a row for it (timed in rounds
    alternating with our fastest candidate) and every row's time over the peer's; where it
    cannot, a skipped row that says why."""
    peer = bench.peer
    calls = []

    class FakePeer:
        def __init__(self, problem, max_seq_len):
            calls.append((problem.rows, max_seq_len))

        def __call__(self):
            return None

        def metadata(self):
            return None

    ceil = {"copy_GBps": 1000.0, "bf16_TFLOPs": 100.0}
    t = make_tuner(FakeTimer({"deepgemm": 5.0, "deepgemm:metadata": 2.0}, default=10.0), top=0, modes={"free"},
                   torch_path=False)
    monkeypatch.setattr(peer, "available", lambda: "deep_gemm is not importable")
    rows = bench.bench(SMOKE[:1], t, ceil, peer="deepgemm")
    skipped = [r for r in rows if r["backend"] == "deepgemm"]
    assert [r["status"] for r in skipped] == ["skipped"] and "not importable" in skipped[0]["note"]
    assert not calls and all(not r.get("vs_peer") for r in rows if r["backend"] == "triton")
    monkeypatch.setattr(peer, "available", lambda: None)
    monkeypatch.setattr(peer, "unsupported", lambda problem: None)
    monkeypatch.setattr(peer, "DeepGemmCall", FakePeer)
    rows = bench.bench(SMOKE[:1], t, ceil, peer="deepgemm")
    theirs = next(r for r in rows if r["backend"] == "deepgemm")
    assert theirs["status"] == "ok" and float(theirs["us"]) == 5.0 and theirs["schedule_us"] == "2.000"
    assert calls == [(SMOKE[0].max_rows, SMOKE[0].max_seq_len)]
    assert "ours / peer 2.000" in theirs["note"]
    assert all(float(r["vs_peer"]) == 2.0 for r in rows if r["backend"] == "triton")
    assert {r["data"] for r in rows} == {"realistic"}


class _FakeDeepGemm:
    """deep_gemm's two MQA-logits calls as their sm_90 kernels define them -- each head's FP8 dot
    product, relu, times its weight, summed over heads, times the key's scale -- in float on the
    CPU: what tuning/peer.py's adapters must feed them for the peer's logits to follow ours."""

    @staticmethod
    def _logits(q, k, scale, w):  # q [R, H, D] e4m3, k [N, D] e4m3, scale [N], w [R, H]
        s = torch.einsum("rhd,nd->rhn", q.float(), k.float()).clamp(min=0)
        return torch.einsum("rhn,rh->rn", s, w) * scale[None, :]

    def fp8_fp4_mqa_logits(self, q, kv, weights, ks, ke, max_seqlen_k):
        (qf, q_sf), (k, scale) = q, kv
        assert q_sf is None and ks.dtype == ke.dtype == torch.int32 and int(ks.max()) == 0
        return self._logits(qf, k, scale, weights)[:, :max_seqlen_k]

    def get_num_sms(self):
        return 132

    def get_paged_mqa_logits_metadata(self, lens, block_kv, num_sms):
        return None

    def fp8_fp4_paged_mqa_logits(self, q, kv_cache, weights, lens, table, meta, max_len):
        qf = q[0]  # [b, next_n, H, D]
        b, n, heads, d = qf.shape
        page = kv_cache.shape[1]
        flat = kv_cache.reshape(kv_cache.shape[0], -1)  # a page: its keys' E4M3 bytes, then their fp32 scales
        vals = flat[:, :page * d].contiguous().view(torch.float8_e4m3fn).view(-1, page, d)
        scales = flat[:, page * d:].contiguous().view(torch.float32).view(-1, page)
        keys = torch.arange(max_len)
        out = []
        for s in range(b):
            pages = table[s, keys // page].long()
            out.append(self._logits(qf[s], vals[pages, keys % page], scales[pages, keys % page],
                                    weights.view(b, n, heads)[s]))
        return torch.cat(out)


@pytest.mark.parametrize("seqs", [[(300, 7)], [(200, 2), (150, 2)]], ids=["prefill", "paged"])
def test_peer_adapters_follow_the_reference(seqs, monkeypatch):
    """tuning/peer.py's conversions (FP8 keys and queries, the fused pages, the prefill's gathered
    keys and windows) checked against the float64 reference through a CPU model of DeepGEMM's two
    calls: the median relative difference is the FP8 rounding's, and rows out of place fail."""
    peer = bench.peer
    monkeypatch.setitem(sys.modules, "deep_gemm", _FakeDeepGemm())
    prob = make_problem(heads=32, page_size=64, seqs=seqs, block_spread=2,
                        generator=torch.Generator().manual_seed(5))
    prefill = len(seqs) == 1
    assert peer.is_prefill(prob) == prefill and peer.unsupported(prob) is None
    call = peer.call_for(prob, prob.max_seq_len)
    assert type(call) is (peer.DeepGemmPrefillCall if prefill else peer.DeepGemmCall)
    assert (call.metadata is None) == prefill
    ref = mqa_logits_reference(*prob.args(), max_seq_len=prob.max_seq_len).ref
    ours = ref.float()
    assert call.check(ours) < 0.06
    assert call.check(ours.roll(1, 0)) > 0.3


# --- the command line -----------------------------------------------------------------------

def test_commands_parse():
    p = _parser()
    a = p.parse_args(["tune", "--suite", "deepseek_v4", "--quick", "--shard", "1/4"])
    assert a.suite == ["deepseek_v4"] and a.shard == "1/4" and a.top == 3 and a.tune_command is None
    a = p.parse_args(["tune", "merge", "a.csv", "b.csv", "-o", "c.csv"])
    assert a.tune_command == "merge" and a.inputs == ["a.csv", "b.csv"] and a.output == "c.csv"
    a = p.parse_args(["bench", "--suite", "deepseek_v4", "--suite", "deepseek_v4_1", "--only", "decode",
                      "--csv", "x.csv", "--png", "x.png", "--best"])
    assert a.suite == ["deepseek_v4", "deepseek_v4_1"] and a.only == ["decode"] and a.best


def run_commands(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "mqa_logits_mxfp4.tuning.commands", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_tune_list_and_bad_shard(capsys):
    assert main(["tune", "--suite", "deepseek_v4", "--quick", "--list", "--shard", "0/2"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(f"{len(suites.SUITES['deepseek_v4'].shapes(True)[0::2])} shapes")
    with pytest.raises(SystemExit) as e:
        main(["tune", "--suite", "deepseek_v4", "--list", "--shard", "2/2"])
    assert e.value.code == 2 and "0 <= I < N" in capsys.readouterr().err


@needs_kernels
def test_tune_workers_shard_and_merge_on_cpu(tmp_path):
    """Two worker processes (one per 'device'), each on its shard, merged into one table."""
    out = tmp_path / "smoke.csv"
    args = ("tune", "--suite", "smoke", "-o", str(out), "--device", "cpu", "--workers", "2", "--instance",
            INSTANCE, "--mode", "free", "--iters", "1", "--rounds", "1", "--no-torch-path")
    res = run_commands(*args)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[cpu0]" in res.stdout and "[cpu1]" in res.stdout and "merged 2 worker tables" in res.stdout
    keys = {r.key for r in table.read_table(out)}
    assert keys == {tuner.setting_key(s.key(CPU), bi) for s in SMOKE for bi in (False, True)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke.csv"]


@pytest.mark.gpu
def test_tune_and_verify_on_the_gpu(tmp_path):
    t = tuner.Tuner("cuda", instances={INSTANCE}, iters=10, rounds=2)
    summary = tuner.tune(SMOKE, tmp_path / "g.csv", t)
    assert len(summary.tuned) == 2
    rows, _ = tuner.verify(tmp_path / "g.csv", tuner.Tuner("cuda", iters=10, rounds=2, torch_path=False))
    assert len(rows) == 4 and all(v.now_us and not v.problem for v in rows)  # 2 shapes x 2 settings
