"""Selection (docs/contract.md, "Dispatch"): env pins, config values, tuned rows, errors, first-use self-check.

CPU only: the Triton backend runs through its interpreter (TRITON_INTERPRET=1, set by CI).
"""

import csv
import dataclasses
import logging
import os
import subprocess
import sys

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.backends.triton import backend as triton_backend
from mqa_logits_mxfp4.backends.triton import instances as triton_instances
from mqa_logits_mxfp4.core import env
from mqa_logits_mxfp4.core.records import RECORD_INTS
from mqa_logits_mxfp4.dispatch import config_cache, registry, table

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="CPU selection needs the Triton interpreter: TRITON_INTERPRET=1")

TRITON_NAMES = [i.name for i in triton_instances.INSTANCES]
BOUNDS = dict(heads=64, max_rows=16, max_seqs=4, max_seq_len=1024)
DEFAULT_DECODE = "fp8_r1n64w4s2"  # the CPU default rule's pick for BOUNDS (fp8 family, fewest rows)


pytestmark = pytest.mark.usefixtures("isolated_dispatch")  # tests/conftest.py


def build(device="cpu", **over):
    return mx.mqa_logits_mxfp4_config(device, **{**BOUNDS, **over})


def setenv(monkeypatch, **values):
    for k, v in values.items():
        monkeypatch.setenv(f"MQA_LOGITS_MXFP4_{k}", v)
    mx.reload()


def test_interpreter_is_on():
    assert triton_backend.interpreting(), "TRITON_INTERPRET=1 is set but the kernels are not interpreted"


# ---------------------------------------------------------------------------------------------
# environment


def test_default_pick():
    cfg = build()
    assert (cfg.backend, cfg.instance, cfg.mode) == ("triton", DEFAULT_DECODE, "free")
    assert cfg.source == "default rule for cpu"
    prefill = build(heads=128, max_rows=64, max_qlen=16)
    assert prefill.mode == "prefill" and prefill.instance == "fp8_r1n64w8s2"  # widest whose accumulator fits


@pytest.mark.parametrize("value", ["triton", " Triton "])
def test_env_backend_triton(monkeypatch, value):
    setenv(monkeypatch, BACKEND=value)
    cfg = build()
    assert cfg.backend == "triton" and cfg.instance == DEFAULT_DECODE
    assert cfg.source.startswith("pinned backend triton (MQA_LOGITS_MXFP4_BACKEND)")


def test_env_backend_auto(monkeypatch):
    setenv(monkeypatch, BACKEND="auto")
    assert build().source == "default rule for cpu"


# Why opus cannot serve these CPU configs: unavailable here (CPU-only torch), or, where it is
# available (a GPU machine), its arch rule.
OPUS_WHY = str(registry.get("opus").available() or "arch: the opus kernels are written for sm_90, gfx942, gfx950; got cpu")


@pytest.mark.parametrize("name, reason", [
    ("opus", OPUS_WHY),
    ("flydsl", str(registry.get("flydsl").available())),
])
def test_env_pinned_unavailable_backend_raises(monkeypatch, name, reason):
    setenv(monkeypatch, BACKEND=name)
    with pytest.raises(mx.PinnedBackendError) as e:
        build()
    msg = str(e.value)
    assert f"pinned backend {name} (MQA_LOGITS_MXFP4_BACKEND) cannot serve" in msg
    assert reason in msg and "H64" in msg


def test_env_unknown_backend_lists_valid(monkeypatch):
    setenv(monkeypatch, BACKEND="bogus")
    with pytest.raises(mx.UnknownBackendError) as e:
        build()
    assert "MQA_LOGITS_MXFP4_BACKEND='bogus' is not a backend" in str(e.value)
    assert str(e.value).endswith("valid: auto, opus, flydsl, triton")


def test_env_pinned_backend_without_fitting_instance(monkeypatch):
    setenv(monkeypatch, BACKEND="triton")
    with pytest.raises(mx.PinnedBackendError) as e:
        build(page_size=12)
    msg = str(e.value)
    assert "pinned backend triton (MQA_LOGITS_MXFP4_BACKEND) has no instance" in msg
    # every instance breaks the rule: it is said once, naming how many and which
    assert ("page_size: 15 instances (fp8_r1n64w4s2, fp8_r1n64w8s2, ..., scaled_r8n64w8s2): needs page_size "
            "in (8, 16, 32, 64, 128); got 12") in msg
    assert msg.count("needs page_size") == 1


@pytest.mark.parametrize("name", ["f16_r2n64w8s2", "scaled_r2n64w8s2"])
def test_env_instance_pins(monkeypatch, name):
    setenv(monkeypatch, INSTANCE=name)
    cfg = build()
    assert (cfg.backend, cfg.instance, cfg.mode) == ("triton", name, "free")
    assert "pinned" in cfg.source and name in cfg.source and "MQA_LOGITS_MXFP4_INSTANCE" in cfg.source
    assert build(max_qlen=16, max_rows=64).mode == "prefill"


def test_env_instance_with_matching_backend(monkeypatch):
    setenv(monkeypatch, BACKEND="triton", INSTANCE="f16_r1n64w4s2")
    assert build().instance == "f16_r1n64w4s2"


def test_env_unknown_instance_lists_valid(monkeypatch):
    setenv(monkeypatch, INSTANCE="fp8_r3n64w4s2")
    with pytest.raises(mx.UnknownBackendError) as e:
        build()
    msg = str(e.value)
    assert "MQA_LOGITS_MXFP4_INSTANCE='fp8_r3n64w4s2' is not an instance" in msg
    valid = msg.split("valid: ")[1].split(", ")
    assert set(TRITON_NAMES) <= set(valid)  # every registered instance of every backend is listed
    assert valid == [i.name for n in registry.names() for i in registry.get(n).instances()]


def test_env_instance_of_another_backend(monkeypatch):
    setenv(monkeypatch, BACKEND="opus", INSTANCE=DEFAULT_DECODE)
    opus_names = ", ".join(i.name for i in registry.get("opus").instances())
    with pytest.raises(mx.UnknownBackendError, match=f"'{DEFAULT_DECODE}' is not an instance of opus; valid: {opus_names}"):
        build()


@pytest.mark.parametrize("name, bounds, reason", [
    ("fp8_r4n64w8s2", dict(heads=128), "tile: fp8_r4n64w8s2 needs rows x heads <= 256; got 4 x 128"),
    ("f16_r8n64w8s2", dict(heads=64), "tile: f16_r8n64w8s2 needs rows x heads <= 256; got 8 x 64"),
    ("fp8_r2n64w8s2", dict(gather=True),
     "gather: fp8_r2n64w8s2 has 2 rows; gather mode needs a one-row instance (each row has its own table)"),
    ("fp8_r1n64w4s2", dict(head_dim=64), "head_dim: fp8_r1n64w4s2 needs head_dim in (128,); got 64"),
])
def test_env_pinned_instance_that_cannot_serve(monkeypatch, name, bounds, reason):
    setenv(monkeypatch, INSTANCE=name)
    with pytest.raises(mx.PinnedBackendError) as e:
        build(**bounds)
    msg = str(e.value)
    assert f"pinned instance triton/{name} (MQA_LOGITS_MXFP4_INSTANCE) cannot serve" in msg
    assert reason in msg


def test_env_unknown_variable_warns(monkeypatch):
    setenv(monkeypatch, FOO="1")
    with pytest.warns(UserWarning, match="unknown environment variable MQA_LOGITS_MXFP4_FOO ignored") as rec:
        build()
    assert "MQA_LOGITS_MXFP4_BACKEND" in str(rec[0].message)  # lists the known names


@pytest.mark.parametrize("value, expect", [("", True), ("1", True), ("0", False), ("off", False),
                                           ("False", False), ("yes", True)])
def test_env_flags(monkeypatch, value, expect):
    setenv(monkeypatch, SELFCHECK=value, DEBUG=value, LOG=value)
    s = env.settings()
    assert s.selfcheck is expect
    assert s.debug is (expect and value != "")  # DEBUG and LOG default off
    assert s.log is (expect and value != "")


def test_env_read_once_until_reload(monkeypatch):
    assert build().backend == "triton"
    monkeypatch.setenv("MQA_LOGITS_MXFP4_BACKEND", "opus")
    assert build().backend == "triton"  # cached settings: no re-read per call
    mx.reload()
    with pytest.raises(mx.PinnedBackendError):
        build()


def test_env_log_prints_without_any_logging_configured():
    """A process that never configured logging still sees MQA_LOGITS_MXFP4_LOG=1's lines."""
    code = ("import mqa_logits_mxfp4 as mx; "
            "mx.mqa_logits_mxfp4_config('cpu', heads=64, max_rows=4, max_seqs=2, max_seq_len=1024)")
    env = {**os.environ, "MQA_LOGITS_MXFP4_LOG": "1", "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "mqa_logits_mxfp4: MqaLogitsConfig(cpu/1: H64 D128 page 64x1" in res.stderr
    assert "(default rule for cpu)" in res.stderr


def test_env_log_once_per_decision(monkeypatch, caplog):
    setenv(monkeypatch, LOG="1")
    with caplog.at_level(logging.INFO, logger="mqa_logits_mxfp4"):
        cfg = build()
        build()
    records = [r.getMessage() for r in caplog.records]
    assert records == [f"mqa_logits_mxfp4: {cfg!r} (default rule for cpu)"]


# ---------------------------------------------------------------------------------------------
# the config as a value


def test_config_is_frozen_and_hashable():
    cfg = build()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.instance = "f16_r1n64w4s2"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.key.heads = 32
    assert cfg.instance == DEFAULT_DECODE and cfg.heads == 64
    assert len({cfg, build(), build(max_seq_len=1025)}) == 2


def test_config_cache_and_equality():
    a = build("cpu")
    b = build(torch.device("cpu"))
    c = mx.mqa_logits_mxfp4_config(torch.device("cpu"), 64, 128, 64, max_rows=16, max_seqs=4,
                                   max_qlen=1, max_seq_len=1024, pages_per_block=1, gather=False)
    assert a is b and a is c
    assert hash(a) == hash(b)
    mx.reload()
    d = build()
    assert d == a and d is not a and hash(d) == hash(a)  # equal by value, not identity
    for field, value in [("max_seq_len", 1025), ("max_rows", 17), ("max_seqs", 5), ("max_qlen", 2),
                         ("heads", 32), ("page_size", 32), ("pages_per_block", 2), ("gather", True)]:
        other = build(**{field: value})
        assert other != a, field
        assert getattr(other, field) == value


def test_config_repr_and_fields():
    cfg = build(max_qlen=2, page_size=32, pages_per_block=2, gather=True)
    assert repr(cfg) == ("MqaLogitsConfig(cpu/1: H64 D128 page 32x2, gather, rows<=16 seqs<=4 qlen<=2 "
                         "seq_len<=1024 -> triton/fp8_r1n64w4s2/free)")
    assert cfg.device == torch.device("cpu")
    assert (cfg.arch, cfg.cu_num, cfg.head_dim, cfg.max_rows, cfg.max_seqs) == ("cpu", 1, 128, 16, 4)
    with pytest.raises(AttributeError):
        cfg.no_such_field


@pytest.mark.parametrize("max_seq_len, page_size, ppb, width", [
    (1024, 64, 1, 16), (1025, 64, 1, 17), (1000, 64, 1, 16), (1, 64, 1, 1),
    (1024, 64, 2, 8), (1000, 16, 4, 16), (1001, 16, 4, 16), (1025, 16, 4, 17), (100, 8, 1, 13),
])
def test_block_table_width(max_seq_len, page_size, ppb, width):
    cfg = build(max_seq_len=max_seq_len, page_size=page_size, pages_per_block=ppb)
    assert cfg.block_table_width == width


def test_schedule_buffers():
    cfg = build(max_seqs=64, max_rows=64, max_seq_len=8192)
    a, b = cfg.schedule_buffers(), cfg.schedule_buffers()
    assert a.shape == (cfg.table_grid, RECORD_INTS) == (cfg.table_grid, 8)
    assert a.dtype == torch.int32 and a.device == torch.device("cpu") and a.is_contiguous()
    assert a.data_ptr() != b.data_ptr()
    a.fill_(7)
    b.fill_(0)
    assert int(a.sum()) == 7 * a.numel()
    assert cfg.table_grid >= 1


def test_explain_names_pick_source_and_rejected_backends():
    cfg = build()
    text = cfg.explain()
    assert repr(cfg.key) in text
    assert f"pick: backend=triton instance={DEFAULT_DECODE} mode=free" in text
    assert "source: default rule for cpu" in text
    assert f"block_table_width {cfg.block_table_width}" in text
    assert f"opus: {OPUS_WHY}" in text
    assert f"flydsl: {registry.get('flydsl').available()}" in text
    assert mx.explain("cpu", **BOUNDS) == text


@pytest.mark.parametrize("bound, value", [
    ("heads", 0), ("head_dim", -128), ("page_size", 6.4), ("max_rows", True), ("max_seqs", "4"),
    ("max_qlen", 0), ("max_seq_len", -1), ("pages_per_block", None), ("max_seq_len", 1024.0),
])
def test_invalid_bounds(bound, value):
    with pytest.raises(mx.InputError) as e:
        build(**{bound: value})
    assert str(e.value) == f"{bound} must be a positive int; got {value!r}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: a CUDA config is valid here")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0, torch.device("cuda", 1)])
def test_cuda_config_without_a_gpu_is_an_input_error(device):
    with pytest.raises(mx.InputError, match=r"needs a GPU, but torch .* sees none; pass device='cpu'"):
        build(device)


def test_table_error_is_one_of_the_family():
    assert issubclass(mx.TableError, mx.MqaLogitsError) and table.TableError is mx.TableError
    assert {"TableError", "CaptureError", "__version__"} <= set(mx.__all__)


def test_invalid_device():
    with pytest.raises(mx.InputError, match="device must be a CUDA/ROCm GPU or the CPU; got meta"):
        build("meta")


def test_cache_keeps_1024_most_recent():
    first = build(max_seq_len=1)
    for n in range(2, 1100):
        build(max_seq_len=n)
    info = config_cache._config_for.cache_info()
    assert info.maxsize == 1024 and info.currsize == 1024
    misses = info.misses
    last = build(max_seq_len=1099)
    assert config_cache._config_for.cache_info().misses == misses  # a recent one is still cached
    again = build(max_seq_len=1)
    assert config_cache._config_for.cache_info().misses == misses + 1  # the oldest was evicted
    assert again == first and again is not first and last.max_seq_len == 1099


# ---------------------------------------------------------------------------------------------
# no backend


ALL_TRITON = "15 instances (fp8_r1n64w4s2, fp8_r1n64w8s2, ..., scaled_r8n64w8s2)"


@pytest.mark.parametrize("bounds, reason", [
    (dict(heads=24), f"heads: {ALL_TRITON}: needs heads in (16, 32, 64, 128); got 24"),
    (dict(heads=12), f"heads: {ALL_TRITON}: needs heads in (16, 32, 64, 128); got 12"),
    (dict(page_size=12), f"page_size: {ALL_TRITON}: needs page_size in (8, 16, 32, 64, 128); got 12"),
    (dict(head_dim=96), "head_dim: 10 instances (fp8_r1n64w4s2, fp8_r1n64w8s2, ..., f16_r8n64w8s2): "
                        "needs head_dim in (128,); got 96"),
])
def test_no_backend_lists_every_backend(bounds, reason):
    with pytest.raises(mx.NoBackendError) as e:
        build(**bounds)
    msg = str(e.value)
    assert msg.startswith("no backend can serve cpu/1:")
    lines = msg.splitlines()[1:]
    assert [ln.strip().split(":")[0] for ln in lines] == ["triton", "opus", "flydsl"]
    assert reason in msg
    rule = reason.split("): ")[1].split(";")[0]
    assert msg.count(rule) == 1  # a rule many instances break is said once
    assert len(lines[0]) < 700, lines[0]  # one line a rule, not one a (rule, instance)
    assert f"opus: {OPUS_WHY}" in msg
    assert f"flydsl: {registry.get('flydsl').available()}" in msg


# ---------------------------------------------------------------------------------------------
# pinned > tuned > default


def write_rows(path, overs: list[dict]):
    """A tuned CSV of one row a dict of overrides (tuned_csv's defaults)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table.COLUMNS))
        w.writeheader()
        w.writerows(tuned_row(**o) for o in overs)
    return str(path)


def tuned_row(**over) -> dict:
    r = dict(schema_version=2, arch="cpu", cu_num=1, heads=64, head_dim=128, page_size=64,
             pages_per_block=1, gather=0, batch_invariant=0, qlen=1, rows=16, seq_len=1024, backend="triton",
             instance="f16_r2n64w8s2", mode="prefill", us=12.5)
    r.update(over)
    return r


def tuned_csv(path, **over):
    return write_rows(path, [over])


def test_tuned_row_picks(monkeypatch, tmp_path):
    f = tuned_csv(tmp_path / "tuned.csv")
    setenv(monkeypatch, CONFIGS=f)
    cfg = build(max_rows=32, max_seq_len=4096)  # nearest row: rows 16, seq_len 1024
    assert (cfg.backend, cfg.instance, cfg.mode) == ("triton", "f16_r2n64w8s2", "prefill")
    assert cfg.source == f"tuned row {f}:2 (prefill, 12.5 us)"
    assert not cfg.recommend_schedule
    assert f"source: tuned row {f}:2" in cfg.explain()
    assert build(heads=32).source == "default rule for cpu"  # no row for H32


def test_tuned_table_mode_recommends_a_schedule(monkeypatch, tmp_path):
    f = tuned_csv(tmp_path / "tuned.csv", mode="table", instance="scaled_r1n64w4s2", us=3)
    setenv(monkeypatch, CONFIGS=f)
    cfg = build()
    assert (cfg.instance, cfg.mode, cfg.recommend_schedule) == ("scaled_r1n64w4s2", "free", True)
    assert "(table: pass a schedule; recommended)" in cfg.explain()
    assert build(max_qlen=16, max_rows=64).mode == "prefill"  # qlen 16 -> Prefill as schedule-free mode


def test_env_pin_beats_tuned_row(monkeypatch, tmp_path):
    f = tuned_csv(tmp_path / "tuned.csv")
    setenv(monkeypatch, CONFIGS=f, INSTANCE="scaled_r1n64w4s2")
    cfg = build()
    assert cfg.instance == "scaled_r1n64w4s2" and "pinned instance" in cfg.source
    setenv(monkeypatch, INSTANCE="", BACKEND="triton")
    cfg = build()
    assert cfg.instance == DEFAULT_DECODE and cfg.source.startswith("pinned backend triton")


@pytest.mark.parametrize("over, reason", [
    (dict(instance="fp8_r3n64w4s2"), "instance: triton has no instance 'fp8_r3n64w4s2'"),
    (dict(backend="cuda"), "backend: no backend named 'cuda'"),
    (dict(backend="opus", instance="opus_r1"),
     str(registry.get("opus").available() or "instance: opus has no instance 'opus_r1'")),
    (dict(heads=128, instance="fp8_r4n64w8s2"), "tile: fp8_r4n64w8s2 needs rows x heads <= 256; got 4 x 128"),
])
def test_unusable_tuned_row_is_skipped(monkeypatch, tmp_path, caplog, over, reason):
    f = tuned_csv(tmp_path / "tuned.csv", **over)
    setenv(monkeypatch, CONFIGS=f)
    heads = over.get("heads", 64)
    with caplog.at_level(logging.INFO, logger="mqa_logits_mxfp4"):
        cfg = build(heads=heads)
    note = f"tuned row {f}:2 skipped: {reason}"
    assert cfg.source == "default rule for cpu"
    assert cfg.instance == (DEFAULT_DECODE if heads == 64 else "fp8_r1n64w8s2")  # 1 x 128 needs 8 warps
    assert note in cfg.explain()
    assert any(note in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# batch_invariant: only canonical instances (docs/numerics.md, "Canonical and non-canonical instances")

SCALED = [i.name for i in triton_instances.INSTANCES if not i.canonical]
NOT_CANONICAL = "is not canonical (docs/numerics.md)"


def test_batch_invariant_is_a_bound_of_the_config():
    default, invariant = build(), build(batch_invariant=True)
    assert default.batch_invariant is False and invariant.batch_invariant is True
    assert invariant != default and invariant.key == dataclasses.replace(default.key, batch_invariant=True)
    assert build(batch_invariant=True) is invariant  # cached like any bound
    assert repr(invariant) == ("MqaLogitsConfig(cpu/1: H64 D128 page 64x1, rows<=16 seqs<=4 qlen<=1 "
                               "seq_len<=1024, batch-invariant -> triton/fp8_r1n64w4s2/free)")
    assert "batch-invariant" not in repr(default)
    assert ("guarantee: batch_invariant: canonical instances only, bitwise identical to each other whatever "
            "the backend, tile, mode or bounds (docs/numerics.md)") in invariant.explain()
    assert ("guarantee: within the tolerance (docs/contract.md): the pick may be any instance, canonical or "
            "not (this one is canonical); batch_invariant=True for bitwise batch invariance") in default.explain()


@pytest.mark.parametrize("value", [None, "yes", 2, "True"])
def test_batch_invariant_must_be_a_bool(value):
    with pytest.raises(mx.InputError, match=f"batch_invariant must be a bool; got {value!r}"):
        build(batch_invariant=value)


def test_env_batch_invariant_makes_every_config_batch_invariant(monkeypatch, recwarn):
    setenv(monkeypatch, BATCH_INVARIANT="1")
    assert env.settings().batch_invariant is True
    assert not [w for w in recwarn if "unknown environment variable" in str(w.message)]
    assert build().batch_invariant is True and build(batch_invariant=False).batch_invariant is True
    setenv(monkeypatch, BATCH_INVARIANT="0")
    assert build().batch_invariant is False and build(batch_invariant=True).batch_invariant is True


@pytest.fixture
def scaled_first(monkeypatch):
    """The CPU default rule with the scaled (non-canonical) family first."""
    monkeypatch.setitem(triton_backend._PREFERRED_FAMILY, "cpu", "scaled")


def test_batch_invariant_default_rule_skips_non_canonical(scaled_first):
    assert build().instance == "scaled_r1n64w4s2"
    assert "(this one is not canonical)" in build().explain()
    cfg = build(batch_invariant=True)
    assert (cfg.instance, cfg.source) == (DEFAULT_DECODE, "default rule for cpu")
    text = cfg.explain()
    # the instances that fit but for the rule, once, grouped (H64: r4 and r8 break the tile rule too)
    assert (f"batch_invariant: 3 instances (scaled_r1n64w4s2, scaled_r1n64w8s2, scaled_r2n64w8s2): "
            f"{NOT_CANONICAL}") in text
    assert text.count(NOT_CANONICAL) == 1
    assert NOT_CANONICAL not in build().explain()


def test_batch_invariant_pinned_backend_picks_its_canonical_instances(monkeypatch, scaled_first):
    setenv(monkeypatch, BACKEND="triton")
    assert build().instance == "scaled_r1n64w4s2"
    cfg = build(batch_invariant=True)
    assert cfg.instance == DEFAULT_DECODE and cfg.source.startswith("pinned backend triton")
    assert f"batch_invariant: 3 instances (scaled_r1n64w4s2, scaled_r1n64w8s2, scaled_r2n64w8s2): " \
        f"{NOT_CANONICAL}" in cfg.explain()
    only_scaled = tuple(i for i in triton_instances.INSTANCES if not i.canonical)
    monkeypatch.setattr(triton_backend, "INSTANCES", only_scaled)
    assert build(max_seq_len=2048).instance == "scaled_r1n64w4s2"
    with pytest.raises(mx.PinnedBackendError) as e:  # never a fallback to a non-canonical one
        build(max_seq_len=2048, batch_invariant=True)
    msg = str(e.value)
    assert "pinned backend triton (MQA_LOGITS_MXFP4_BACKEND) has no instance for" in msg
    assert f"batch_invariant: 5 instances (scaled_r1n64w4s2, scaled_r1n64w8s2, ..., scaled_r8n64w8s2): " \
        f"{NOT_CANONICAL}" in msg


@pytest.mark.parametrize("name", SCALED[:2])
def test_batch_invariant_pinned_non_canonical_instance_raises(monkeypatch, name):
    setenv(monkeypatch, INSTANCE=name)
    assert build().instance == name
    with pytest.raises(mx.PinnedBackendError) as e:
        build(batch_invariant=True)
    msg = str(e.value)
    assert f"pinned instance triton/{name} (MQA_LOGITS_MXFP4_INSTANCE) cannot serve" in msg
    assert msg.endswith(f"batch_invariant: {name} {NOT_CANONICAL}")
    setenv(monkeypatch, INSTANCE=DEFAULT_DECODE)
    assert build(batch_invariant=True).instance == DEFAULT_DECODE


def test_batch_invariant_tuned_rows(monkeypatch, tmp_path, caplog):
    """Lookup is exact on batch_invariant; a batch_invariant row naming a non-canonical instance
    (hand-made: the tuner writes none) is skipped with the rule as its reason."""
    f = write_rows(tmp_path / "tuned.csv", [dict(instance="scaled_r1n64w4s2"),
                                            dict(batch_invariant=1, instance="f16_r1n64w4s2", mode="free")])
    setenv(monkeypatch, CONFIGS=f)
    assert build().instance == "scaled_r1n64w4s2" and build().source.startswith(f"tuned row {f}:2")
    cfg = build(batch_invariant=True)
    assert cfg.instance == "f16_r1n64w4s2" and cfg.source.startswith(f"tuned row {f}:3")
    bad = write_rows(tmp_path / "bad.csv", [dict(batch_invariant=1, instance="scaled_r1n64w4s2")])
    setenv(monkeypatch, CONFIGS=bad)
    with caplog.at_level(logging.INFO, logger="mqa_logits_mxfp4"):
        cfg = build(batch_invariant=True)
    note = f"tuned row {bad}:2 skipped: batch_invariant: scaled_r1n64w4s2 {NOT_CANONICAL}"
    assert cfg.instance == DEFAULT_DECODE and cfg.source == "default rule for cpu"
    assert note in cfg.explain() and any(note in r.getMessage() for r in caplog.records)
    assert build().source == "default rule for cpu"  # no batch_invariant=0 row in that file


# ---------------------------------------------------------------------------------------------
# first-use self-check of an instance not validated on this arch

SMALL = dict(heads=16, page_size=16, max_rows=8, max_seqs=4, max_seq_len=100)


@pytest.fixture
def unvalidated(monkeypatch):
    """make(name, corrupt): mark `name` unvalidated everywhere; `corrupt` spoils its output.
    Returns the list of (instance, mode) launches seen."""
    launches = []
    real_launch = triton_backend.TritonBackend.launch

    def make(name, corrupt):
        marked = tuple(dataclasses.replace(i, validated_on=()) if i.name == name else i
                       for i in triton_instances.INSTANCES)
        monkeypatch.setattr(triton_instances, "INSTANCES", marked)
        monkeypatch.setattr(triton_backend, "INSTANCES", marked)

        def launch(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                   query_start_loc, row_ends, out, out_offsets, records):
            launches.append((cfg.instance, mode))
            real_launch(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                        query_start_loc, row_ends, out, out_offsets, records)
            if corrupt and cfg.instance == name:
                out.mul_(2.0).add_(1.0)

        monkeypatch.setattr(triton_backend.TritonBackend, "launch", launch)
        return launches

    return make


def test_selfcheck_failure_disables_instance(unvalidated, caplog, monkeypatch):
    launches = unvalidated(DEFAULT_DECODE, corrupt=True)
    with caplog.at_level(logging.WARNING, logger="mqa_logits_mxfp4"):
        cfg = build(**SMALL)
    assert cfg.instance == "fp8_r1n64w8s2" and cfg.source == "default rule for cpu"
    assert launches == [(DEFAULT_DECODE, "table")]  # stops at the first mismatch
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert warned[0].startswith(f"mqa_logits_mxfp4: triton/{DEFAULT_DECODE} disabled on cpu: table mode: ")
    assert "break |out - ref|" in warned[0]
    assert f"triton/{DEFAULT_DECODE}: self-check failed: table mode: " in cfg.explain()

    # disabled for the process: another config does not re-run the check
    other = build(**{**SMALL, "max_seq_len": 200})
    assert other.instance == "fp8_r1n64w8s2" and len(launches) == 1
    # and a pin of the failed instance raises with the mismatch (settings re-read; the
    # self-check result is kept, since reload() would drop it)
    monkeypatch.setenv("MQA_LOGITS_MXFP4_INSTANCE", DEFAULT_DECODE)
    env.settings.cache_clear()
    with pytest.raises(mx.PinnedBackendError) as e:
        build(**SMALL)
    assert f"pinned instance triton/{DEFAULT_DECODE} (MQA_LOGITS_MXFP4_INSTANCE) failed its self-check " \
        "on cpu: table mode: " in str(e.value)
    assert len(launches) == 1


def test_selfcheck_off_picks_without_check(unvalidated, monkeypatch):
    launches = unvalidated(DEFAULT_DECODE, corrupt=True)
    setenv(monkeypatch, SELFCHECK="0")
    cfg = build(**SMALL)
    assert cfg.instance == DEFAULT_DECODE and launches == []


def test_selfcheck_pass_picks_instance(unvalidated):
    launches = unvalidated(DEFAULT_DECODE, corrupt=False)
    cfg = build(**SMALL)
    assert cfg.instance == DEFAULT_DECODE and cfg.source == "default rule for cpu"
    assert launches == [(DEFAULT_DECODE, m) for m in ("table", "free", "prefill")]
    assert "self-check" not in cfg.explain()
    build(**{**SMALL, "max_seq_len": 200})
    assert len(launches) == 3  # passed once, not re-run


def test_validated_instance_is_not_checked(unvalidated):
    launches = unvalidated("f16_r8n64w8s2", corrupt=True)
    assert build(**SMALL).instance == DEFAULT_DECODE and launches == []
