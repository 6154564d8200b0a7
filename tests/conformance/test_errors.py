"""docs/contract.md ("Errors"): each bad input is refused before any launch, by a message naming the rule
and the observed value, and `out` is left exactly as it was."""

import threading

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.core.errors import InputError, MqaLogitsError, ScheduleError

from .common import DEVICES, POISON, build, need_device


def _setup(device):
    need_device(device)
    prob = build("v4_decode", device, seed=21)
    cfg = mx.mqa_logits_mxfp4_config(device, heads=64, page_size=16, max_rows=prob.rows,
                                     max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=prob.max_seq_len)
    out = torch.full((prob.rows, cfg.max_seq_len), POISON, device=device)
    args = dict(zip(("q", "q_scale", "kv_cache", "kv_scale", "weights", "block_tables",
                     "query_start_loc", "row_ends"), prob.args()))
    return prob, cfg, out, args


def _call(args, **kw):
    a = dict(args)
    return mx.mqa_logits_mxfp4(a.pop("q"), a.pop("q_scale"), a.pop("kv_cache"), a.pop("kv_scale"),
                               a.pop("weights"), a.pop("block_tables"), a.pop("query_start_loc"),
                               a.pop("row_ends"), **kw)


def _try(failed, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 -- reported to the test's thread
        failed.append(e)


def _mutations(prob, cfg, out):
    """(name, replaced args, extra kwargs, expected message fragment)."""
    rows = prob.rows
    narrow_cfg = mx.mqa_logits_mxfp4_config(cfg.device, heads=64, page_size=16, max_rows=rows - 1,
                                            max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=cfg.max_seq_len)
    few_seqs = mx.mqa_logits_mxfp4_config(cfg.device, heads=64, page_size=16, max_rows=rows,
                                          max_seqs=prob.num_seqs - 1, max_qlen=2, max_seq_len=cfg.max_seq_len)
    other_heads = mx.mqa_logits_mxfp4_config(cfg.device, heads=32, page_size=16, max_rows=rows,
                                             max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=cfg.max_seq_len)
    other_page = mx.mqa_logits_mxfp4_config(cfg.device, heads=64, page_size=32, max_rows=rows,
                                            max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=cfg.max_seq_len)
    k4 = prob.kv_cache.reshape(prob.kv_cache.shape[0], 4, prob.page_size // 4, -1)
    return [
        ("int64 row_ends", {"row_ends": prob.row_ends.long()}, {}, "row_ends must be torch.int32 (int64 row_ends are rejected"),
        ("float q", {"q": prob.q.float()}, {}, "q must be uint8 (E2M1 pairs / E8M0 bytes); got torch.float32"),
        ("int16 kv_scale", {"kv_scale": prob.kv_scale.to(torch.int16)}, {}, "kv_scale must be uint8"),
        ("fp16 weights", {"weights": prob.weights.half()}, {}, "weights must be torch.bfloat16 or torch.float32; got torch.float16"),
        ("int64 block_tables", {"block_tables": prob.block_tables.long()}, {}, "block_tables must be torch.int32; got torch.int64"),
        ("int64 query_start_loc", {"query_start_loc": prob.query_start_loc.long()}, {}, "query_start_loc must be torch.int32"),
        ("4-D kv_cache", {"kv_cache": k4}, {}, "MFMA-permuted (preshuffled) layout"),
        ("2-D q", {"q": prob.q.flatten(1)}, {}, "q must be 3-D [rows, heads, head_dim/2]; got 2-D"),
        ("heads", {}, {"cfg": other_heads}, "heads must equal cfg.heads = 32; got 64"),
        ("head_dim", {"q": prob.q[..., :32].contiguous()}, {}, "head_dim must equal cfg.head_dim = 128; got 64"),
        ("page size", {}, {"cfg": other_page}, "page_size must equal cfg.page_size = 32; got 16"),
        ("rows over max_rows", {}, {"cfg": narrow_cfg}, f"rows must be <= cfg.max_rows = {rows - 1}; got {rows}"),
        ("seqs over max_seqs", {}, {"cfg": few_seqs}, f"sequences must be <= cfg.max_seqs = {prob.num_seqs - 1}; got {prob.num_seqs}"),
        ("short weights", {"weights": prob.weights[:-1]}, {}, f"weights must be [>= rows, heads] = [>= {rows}, 64]; got [{rows - 1}, 64]"),
        ("narrow block_tables", {"block_tables": prob.block_tables[:, :cfg.block_table_width - 1]}, {},
         f"block_tables must be at least cfg.block_table_width = {cfg.block_table_width} wide; got {cfg.block_table_width - 1}"),
        ("few table rows", {"block_tables": prob.block_tables[:prob.num_seqs - 1]}, {},
         f"block_tables must have >= num_seqs = {prob.num_seqs} rows; got {prob.num_seqs - 1}"),
        ("narrow out", {}, {"out": out[:, :-1]}, f"out must be at least [rows, cfg.max_seq_len] = [{rows}, {cfg.max_seq_len}]; got [{rows}, {cfg.max_seq_len - 1}]"),
        ("short out", {}, {"out": out[:-1]}, "out must be at least [rows, cfg.max_seq_len]"),
        ("fp64 out", {}, {"out": out.double()},
         "out must be torch.float32 or torch.bfloat16 or torch.float16; got torch.float64"),
        ("int32 out", {}, {"out": out.int()}, "out must be torch.float32 or torch.bfloat16 or torch.float16; got torch.int32"),
        ("out_dtype beside another out", {}, {"out_dtype": torch.bfloat16},
         "out_dtype must be None or out's dtype when out is given; got out_dtype=torch.bfloat16 with out of torch.float32"),
        ("fp64 out_dtype", {}, {"out": None, "out_dtype": torch.float64},
         "out_dtype must be torch.float32 or torch.bfloat16 or torch.float16; got torch.float64"),
        ("int64 row_starts", {}, {"row_starts": torch.zeros(rows, dtype=torch.int64, device=cfg.device)},
         "row_starts must be torch.int32; got torch.int64"),
        ("short row_starts", {}, {"row_starts": torch.zeros(rows - 1, dtype=torch.int32, device=cfg.device)},
         f"row_starts must have one entry per row_ends entry ({rows}); got {rows - 1}"),
        ("2-D row_starts", {}, {"row_starts": torch.zeros(rows, 1, dtype=torch.int32, device=cfg.device)},
         "row_starts must be 1-D [rows]; got 2-D"),
        ("strided out", {}, {"out": out.t().contiguous().t()}, "out must have a contiguous last dim"),
        ("out_offsets without out", {}, {"out": None, "out_offsets": torch.zeros(rows, dtype=torch.int64, device=cfg.device)},
         "out_offsets needs a caller-provided flat out (torch.float32, torch.bfloat16, torch.float16); got out=None"),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_every_input_error_names_rule_and_value(device):
    prob, cfg, out, args = _setup(device)
    cases = _mutations(prob, cfg, out)
    for name, repl, kw, fragment in cases:
        kw = {"cfg": cfg, "out": out, **kw}
        with pytest.raises(InputError) as e:
            _call({**args, **repl}, **kw)
        assert fragment in str(e.value), f"{name}: {e.value}"
        assert bool((out == POISON).all()), f"{name}: out was written"


@pytest.mark.parametrize("device", DEVICES)
def test_errors_after_an_accepted_call_with_the_same_config(device, monkeypatch):
    """The op remembers input signatures it accepted (dtypes, shapes, strides, devices) and skips
    the checks for them: a bad input after a good call with the same config is still refused,
    and a repeated good call does not re-run the checks."""
    from mqa_logits_mxfp4.dispatch import api, registry
    prob, cfg, out, args = _setup(device)
    monkeypatch.setattr(api, "_launcher", lambda cfg, mode: None)   # the hot path: the test below
    launches = []
    # patched on the class: undoing a patch of the instance would leave a bound method behind on
    # it, shadowing later tests' class-level patches
    monkeypatch.setattr(type(registry.get(cfg.backend)), "launch", lambda self, *a, **k: launches.append(a[1]))
    checked = []
    real_check = api.check_inputs
    monkeypatch.setattr(api, "check_inputs", lambda *a, **k: (checked.append(1), real_check(*a, **k)))
    _call(args, cfg=cfg, out=out)
    _call(args, cfg=cfg, out=out)
    assert len(launches) == 2 and len(checked) == 1   # the second call's signature was accepted before
    for name, repl, kw, fragment in _mutations(prob, cfg, out):
        kw = {"cfg": cfg, "out": out, **kw}
        with pytest.raises(InputError) as e:
            _call({**args, **repl}, **kw)
        assert fragment in str(e.value), f"{name}: {e.value}"
    assert len(launches) == 2 and bool((out == POISON).all())
    with pytest.raises(InputError, match="q must be a torch.Tensor; got list"):
        _call({**args, "q": [1, 2]}, cfg=cfg, out=out)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["pick", "triton"])
def test_hot_path_takes_only_accepted_signatures(monkeypatch, backend):
    """A backend's hot path (the opus backend's C++ Launcher; the Triton backend's compiled kernel
    through the opus extension's FunctionLauncher) launches a call whose signature its config's
    checks accepted, with the result of the full path, on torch's current stream; every bad input
    after it still gets its InputError and leaves out as it was."""
    from mqa_logits_mxfp4.backends.opus import jit
    from mqa_logits_mxfp4.dispatch import api, registry
    from mqa_logits_mxfp4.dispatch.config import make_config
    prob, cfg, out, args = _setup("cuda")
    if backend != "pick":
        be = registry.get(backend)
        cfg = make_config(cfg.key, be, be.ranked_picks(cfg.key)[0][0], cfg.mode, "test")
        if be.offers_launcher and jit.load_cached() is None:
            pytest.skip("the Triton hot path launches through the opus extension, which is not built here")
    if not registry.get(cfg.backend).offers_launcher:
        pytest.skip(f"the {cfg.backend} backend offers no hot path here")
    for _ in range(3):  # the full path: loads the extension / compiles, then the launcher accepts
        _call(args, cfg=cfg, out=out)
    first = out.clone()
    assert bool((first != POISON).any())   # scored cells (out keeps its poison outside the windows)
    fast = api._launcher(cfg, cfg.mode)
    assert fast is not None and fast.signatures() >= 1
    known = fast.signatures()
    python_path = []
    monkeypatch.setattr(type(registry.get(cfg.backend)), "launch", lambda *a, **k: python_path.append(1))
    monkeypatch.setattr(api, "check_inputs", lambda *a, **k: python_path.append(1))
    out.fill_(POISON)
    _call(args, cfg=cfg, out=out)
    assert python_path == [] and torch.equal(out, first)
    side = torch.cuda.Stream()
    out.fill_(POISON)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        side.wait_stream(torch.cuda.default_stream())
        _call(args, cfg=cfg, out=out)
    side.synchronize()
    assert python_path == [] and torch.equal(out, first)
    out.fill_(POISON)
    torch.cuda.synchronize()
    failed = []   # a thread that has not used the GPU yet (no current context there)
    worker = threading.Thread(target=lambda: _try(failed, _call, args, cfg=cfg, out=out))
    worker.start()
    worker.join()
    torch.cuda.synchronize()
    assert failed == [] and python_path == [] and torch.equal(out, first)
    if hasattr(torch, "float4_e2m1fn_x2") and hasattr(torch, "float8_e8m0fnu"):
        # torch's MXFP4 dtypes are the same bytes: the accepted uint8 signature serves them too
        views = {"q": args["q"].view(torch.float4_e2m1fn_x2), "q_scale": args["q_scale"].view(torch.float8_e8m0fnu),
                 "kv_cache": args["kv_cache"].view(torch.float4_e2m1fn_x2),
                 "kv_scale": args["kv_scale"].view(torch.float8_e8m0fnu)}
        out.fill_(POISON)
        _call({**args, **views}, cfg=cfg, out=out)
        assert python_path == [] and torch.equal(out, first) and fast.signatures() == known
    monkeypatch.undo()
    out.fill_(POISON)
    for name, repl, kw, fragment in _mutations(prob, cfg, out):
        kw = {"cfg": cfg, "out": out, **kw}
        with pytest.raises(InputError) as e:
            _call({**args, **repl}, **kw)
        assert fragment in str(e.value), f"{name}: {e.value}"
    torch.cuda.synchronize()
    assert bool((out == POISON).all()) and fast.signatures() == known
    wide = torch.full((prob.rows, cfg.max_seq_len + 8), POISON, device="cuda")
    for _ in range(2):  # another valid signature: checked (Triton: compiled for its strides), then accepted
        _call(args, cfg=cfg, out=wide)
    assert fast.signatures() == known + 1 and torch.equal(wide[:, :cfg.max_seq_len], first)


@pytest.mark.parametrize("device", DEVICES)
def test_tensors_on_another_device(device):
    prob, cfg, out, args = _setup(device)
    if device == "cpu":
        meta = prob.weights.to("meta")
        with pytest.raises(InputError, match=r"every tensor must be on the config's device cpu; weights is on meta"):
            _call({**args, "weights": meta}, cfg=cfg, out=out)
    else:
        with pytest.raises(InputError, match=r"every tensor must be on the config's device cuda:\d; row_ends is on cpu"):
            _call({**args, "row_ends": prob.row_ends.cpu()}, cfg=cfg, out=out)
    assert bool((out == POISON).all())


@pytest.mark.parametrize("device", DEVICES)
def test_schedule_from_another_config_or_other_tensors(device):
    prob, cfg, out, args = _setup(device)
    other = mx.mqa_logits_mxfp4_config(device, heads=64, page_size=16, max_rows=prob.rows + 1,
                                       max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=prob.max_seq_len)
    sched = mx.mqa_logits_mxfp4_schedule(other, prob.query_start_loc, prob.row_ends)
    with pytest.raises(ScheduleError, match="schedule was built for another config"):
        _call(args, cfg=cfg, out=out, schedule=sched)
    sched = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc.clone(), prob.row_ends)
    with pytest.raises(ScheduleError, match="schedule was built from other tensors: query_start_loc"):
        _call(args, cfg=cfg, out=out, schedule=sched)
    sched = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends[:-1])
    with pytest.raises(ScheduleError, match="schedule was built from other tensors: row_ends"):
        _call(args, cfg=cfg, out=out, schedule=sched)
    starts = torch.zeros(prob.rows, dtype=torch.int32, device=device)
    sched = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends)
    with pytest.raises(ScheduleError, match=r"schedule was built from other tensors: row_starts was none, this call passes \(ptr"):
        _call(args, cfg=cfg, out=out, schedule=sched, row_starts=starts)
    sched = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends, row_starts=starts)
    with pytest.raises(ScheduleError, match=r"schedule was built from other tensors: row_starts was \(ptr .*\), this call passes none"):
        _call(args, cfg=cfg, out=out, schedule=sched)
    with pytest.raises(InputError, match=r"buffers must be cfg.schedule_buffers\(\)"):
        mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends,
                                     buffers=torch.empty(3, 8, dtype=torch.int32, device=device))
    with pytest.raises(ScheduleError, match=r"schedule must be what mqa_logits_mxfp4_schedule\(\) returns "
                                            r"\(an MqaLogitsSchedule\); got torch.Tensor"):
        _call(args, cfg=cfg, out=out, schedule=cfg.schedule_buffers())  # the records, not a schedule
    with pytest.raises(InputError, match="cfg must be an MqaLogitsConfig"):
        mx.mqa_logits_mxfp4_schedule(None, prob.query_start_loc, prob.row_ends)
    assert bool((out == POISON).all())


def test_config_errors_list_backends_and_reasons(monkeypatch):
    with pytest.raises(MqaLogitsError, match=r"(?s)no backend can serve .*triton: .*heads in \(16, 32, 64, 128\); got 24.*opus: \w+: the opus kernels"):
        mx.mqa_logits_mxfp4_config("cpu", heads=24, page_size=64, max_rows=1, max_seqs=1, max_seq_len=64)
    monkeypatch.setenv("MQA_LOGITS_MXFP4_BACKEND", "nope")
    mx.reload()
    try:
        with pytest.raises(MqaLogitsError, match="is not a backend; valid: auto, opus, flydsl, triton"):
            mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=1, max_seqs=1, max_seq_len=64)
        monkeypatch.setenv("MQA_LOGITS_MXFP4_BACKEND", "opus")
        mx.reload()
        with pytest.raises(MqaLogitsError, match="pinned backend opus .* cannot serve"):
            mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=1, max_seqs=1, max_seq_len=64)
    finally:
        monkeypatch.delenv("MQA_LOGITS_MXFP4_BACKEND")
        mx.reload()


def test_debug_mode_checks_the_caller_contract(monkeypatch):
    prob, cfg, out, args = _setup("cpu")
    monkeypatch.setenv("MQA_LOGITS_MXFP4_DEBUG", "1")
    mx.reload()
    try:
        bad = prob.row_ends.clone()
        bad[0] = cfg.max_seq_len + 1
        with pytest.raises(InputError, match=r"row_ends must lie in \[0, cfg.max_seq_len"):
            _call({**args, "row_ends": bad}, cfg=cfg, out=out)
        bad_qsl = prob.query_start_loc.clone()
        bad_qsl[-1] = prob.rows + 1
        with pytest.raises(InputError, match=r"query_start_loc\[-1\] must be <= rows"):
            _call({**args, "query_start_loc": bad_qsl}, cfg=cfg, out=out)
        starts = torch.zeros(prob.rows, dtype=torch.int32)
        starts[0] = int(prob.row_ends[0]) + 1
        with pytest.raises(InputError, match=r"row_starts must lie in \[0, row_ends\[r\]\] for live rows; "
                                             rf"row_starts\[0\] = {int(starts[0])}, row_ends\[0\] = {int(prob.row_ends[0])}"):
            _call(args, cfg=cfg, out=out, row_starts=starts)
        starts = torch.zeros(prob.rows, dtype=torch.int32)
        starts[0] = 5  # rows 0 and 1 are one sequence's (v4_decode: 2 rows)
        with pytest.raises(InputError, match=r"row_starts must not decrease along a sequence's rows; sequence 0 has "
                                             r"row_starts\[1\] = 0 < row_starts\[0\] = 5"):
            _call(args, cfg=cfg, out=out, row_starts=starts)
        assert bool((out == POISON).all())
    finally:
        monkeypatch.delenv("MQA_LOGITS_MXFP4_DEBUG")
        mx.reload()
