"""Graph safety: the op's host path never reads device data; CUDA graphs replay with inputs
refreshed in place; torch.compile(fullgraph=True) traces through the custom op."""

import contextlib
import os
import sys

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.core.errors import InputError, ScheduleError
from mqa_logits_mxfp4.reference import compare_to_reference, mqa_logits_reference

from .common import DEVICES, MODES, POISON, build, candidates, config, need_device, run, window_starts

PKG = os.path.dirname(mx.__file__)
_READS = ("item", "tolist", "cpu", "numpy", "nonzero", "unique", "__bool__", "__int__", "__float__",
          "__index__")


@contextlib.contextmanager
def no_host_reads():
    """Raise on a host read of tensor data made by the package's own code (not by Triton's
    interpreter, which is how kernels run on the CPU)."""
    saved = {}

    def trap(name, orig):
        def wrapper(*a, **k):
            f = sys._getframe(1)
            if f.f_code.co_filename.startswith(PKG):
                raise AssertionError(f"host read of device data: Tensor.{name} at "
                                     f"{f.f_code.co_filename}:{f.f_lineno}")
            return orig(*a, **k)
        return wrapper

    for name in _READS:
        saved[name] = getattr(torch.Tensor, name)
        setattr(torch.Tensor, name, trap(name, saved[name]))
    saved_sync = torch.cuda.synchronize
    torch.cuda.synchronize = trap("cuda.synchronize", saved_sync)
    try:
        yield
    finally:
        for name, orig in saved.items():
            setattr(torch.Tensor, name, orig)
        torch.cuda.synchronize = saved_sync


def test_trap_catches_a_planted_read():
    t = torch.ones(3)
    planted = compile("t.sum().item()", os.path.join(PKG, "dispatch", "api.py"), "eval")
    with no_host_reads(), pytest.raises(AssertionError, match="host read of device data: Tensor.item"):
        eval(planted, {"t": t})
    assert eval(planted, {"t": t}) == 3.0  # and the trap is gone afterwards


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_op_path_reads_no_device_data(mode, device):
    need_device(device)
    prob = build("v41_full", device, seed=31)
    pair = candidates()[0].values[0]
    cfg = config(prob, pair, mode)
    flat = torch.full((prob.rows * (cfg.max_seq_len + 1),), POISON, device=device)
    offs = torch.arange(prob.rows, device=device, dtype=torch.int64) * (cfg.max_seq_len + 1)
    with no_host_reads():
        out = run(prob, cfg, mode)
        run(prob, cfg, mode, out=flat, out_offsets=offs)
        mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg)  # allocating path
    ref = mqa_logits_reference(*prob.args(), max_seq_len=cfg.max_seq_len, pages_per_block=prob.pages_per_block)
    assert compare_to_reference(out, ref) == []


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    need_device(device)
    prob = build("v4_decode", device, seed=37)
    cfg = mx.mqa_logits_mxfp4_config(device, heads=64, page_size=16, max_rows=prob.rows,
                                     max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=prob.max_seq_len)

    def step(*args):
        out = mx.mqa_logits_mxfp4(*args, cfg=cfg)
        return torch.nan_to_num(out, neginf=-1.0)  # something after the op, in the same graph

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    got = compiled(*prob.args())
    want = step(*prob.args())
    assert torch.equal(got, want)
    assert bool((got[:prob.live_rows] != -1.0).any())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_with_row_starts_and_a_narrow_out(device):
    """The custom op carries row_starts and allocates the out_dtype it is asked for."""
    need_device(device)
    prob = build("v4_decode", device, seed=41)
    starts = window_starts(prob, 41)
    cfg = mx.mqa_logits_mxfp4_config(device, heads=64, page_size=16, max_rows=prob.rows,
                                     max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=prob.max_seq_len)

    def step(*args, row_starts):
        return mx.mqa_logits_mxfp4(*args, cfg=cfg, row_starts=row_starts, out_dtype=torch.bfloat16)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    got = compiled(*prob.args(), row_starts=starts)
    want = step(*prob.args(), row_starts=starts)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    ref = mqa_logits_reference(*prob.args(), max_seq_len=cfg.max_seq_len, row_starts=starts)
    assert compare_to_reference(got, ref) == []
    assert bool((got[:prob.live_rows][~ref.window.to(got.device)] == float("-inf")).all())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_runs_every_check_and_raises_our_errors(device, isolated_dispatch):
    """docs/contract.md ("torch.compile"): the op's real implementation makes the schedule, input
    and MQA_LOGITS_MXFP4_DEBUG checks on the real tensors, so even under fullgraph=True their
    errors reach the caller as themselves; an error the trace itself raises reaches it as torch's
    Unsupported (with ours as its cause) under fullgraph=True, and as itself without it."""
    need_device(device)
    prob = build("v4_decode", device, seed=53)
    cfg = mx.mqa_logits_mxfp4_config(device, heads=64, page_size=16, max_rows=prob.rows,
                                     max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=prob.max_seq_len)
    other = mx.mqa_logits_mxfp4_config(device, heads=64, page_size=16, max_rows=prob.rows + 1,
                                       max_seqs=prob.num_seqs, max_qlen=2, max_seq_len=prob.max_seq_len)

    def step(*args, schedule=None, out=None, out_offsets=None):
        return mx.mqa_logits_mxfp4(*args, cfg=cfg, schedule=schedule, out=out, out_offsets=out_offsets)

    torch._dynamo.reset()
    backend = "aot_eager" if device == "cpu" else "inductor"
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    sched = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends)
    assert torch.equal(compiled(*prob.args(), schedule=sched), step(*prob.args()))
    with pytest.raises(ScheduleError, match="schedule was built for another config"):
        compiled(*prob.args(), schedule=mx.mqa_logits_mxfp4_schedule(other, prob.query_start_loc, prob.row_ends))
    with pytest.raises(ScheduleError, match="schedule was built from other tensors: row_ends"):
        compiled(*prob.args(), schedule=mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends.clone()))
    args = list(prob.args())
    args[4] = prob.weights.half()
    with pytest.raises(InputError, match="weights must be torch.bfloat16 or torch.float32; got torch.float16"):
        compiled(*args)
    bad_table = prob.block_tables.clone()
    bad_table[0, 1] = prob.kv_cache.shape[0] + 5
    args = list(prob.args())
    args[5] = bad_table
    isolated_dispatch.setenv("MQA_LOGITS_MXFP4_DEBUG", "1")
    mx.reload()
    with pytest.raises(InputError, match=r"block_tables\[0, 1\] = \d+ \(sequence 0, keys 16\.\.31\)"):
        compiled(*args)
    offs = torch.zeros(prob.rows, dtype=torch.int64, device=device)
    with pytest.raises(torch._dynamo.exc.Unsupported) as e:
        compiled(*prob.args(), out_offsets=offs)
    # the cause names our exception; torch 2.13 keeps its message, torch 2.11 only its class
    cause = str(e.value.__cause__)
    assert "out_offsets needs a caller-provided flat out" in cause or "(InputError)" in cause, cause
    torch._dynamo.reset()
    with pytest.raises(InputError, match="out_offsets needs a caller-provided flat out"):
        torch.compile(step, backend=backend)(*prob.args(), out_offsets=offs)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pair", candidates())
def test_cuda_graph_replay_with_inputs_refreshed_in_place(pair, mode):
    prob = build("v4_decode", "cuda", seed=41)
    cfg = config(prob, pair, mode)
    out = torch.full((prob.rows, cfg.max_seq_len), POISON, device="cuda")
    buffers = cfg.schedule_buffers()

    def step():
        sched = (mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends, buffers=buffers)
                 if mode == "table" else None)
        mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg, schedule=sched, out=out)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm up: compile and load outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (43, 47):  # new data, same shapes, copied into the captured tensors
        fresh = build("v4_decode", "cuda", seed=seed)
        for name in ("q", "q_scale", "kv_cache", "kv_scale", "weights", "block_tables",
                     "query_start_loc", "row_ends"):
            getattr(prob, name).copy_(getattr(fresh, name))
        out.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        want = run(fresh, cfg, mode)
        assert torch.equal(out, want[:out.shape[0], :out.shape[1]])
        ref = mqa_logits_reference(*fresh.args(), max_seq_len=cfg.max_seq_len)
        assert compare_to_reference(out, ref) == []
