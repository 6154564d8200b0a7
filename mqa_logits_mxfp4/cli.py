"""Command line: `mqa-logits-mxfp4 run | explain | isa | build | tune | bench` (also
`python -m mqa_logits_mxfp4`); README.md and docs/contract.md ("Command line") describe them.

- run: a small DeepSeek-V4-shaped forward (a decode step and a prefill) on the best device
  present, checked against the float64 reference, with the decision and timings printed.
- explain: the dispatcher's decision for given static bounds (or a model preset).
- isa: AOT-compiles every Triton instance for its native targets (no GPU needed) and checks
  which MMA instructions appear, registers and spills (backends/triton/isa.py).
- build: builds the opus extension into its cache ahead of first use (or `--check`s the cache).
- tune, bench: tuning/commands.py.

On the CPU, Triton kernels run only through the interpreter, so `run` and `explain` set
TRITON_INTERPRET=1 for a CPU device before triton is imported (devices.py: Triton reads it when
it decorates its own library and our kernels), so nothing this module imports at its top
imports triton. `isa` needs the opposite: decorated kernels cannot be AOT-compiled under the
interpreter, so it refuses to run when TRITON_INTERPRET is on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from . import __version__, problems, reference
from .backends.opus import jit
from .backends.triton import isa
from .core.errors import MqaLogitsError
from .devices import interpret_on, parse_device, use_interpreter
from .dispatch.api import mqa_logits_mxfp4
from .dispatch.config_cache import mqa_logits_mxfp4_config
from .dispatch.schedule import mqa_logits_mxfp4_schedule
from .models import MODELS
from .tuning.commands import add_commands

V4 = MODELS["deepseek_v4"]
_BASE_BOUNDS = dict(V4.geometry(), max_seq_len=8192)  # explain's defaults without --model


# --- run -----------------------------------------------------------------------------------

# (step, sequences as (context tokens, rows), graph-padding rows); DeepSeek-V4 layers (ratio 4).
_RUN_GPU = (("decode", ((2048, 2), (4096, 2), (6144, 2), (8192, 2)), 4),
            ("prefill", ((8192, 512),), 0))
_RUN_CPU = (("decode", ((1024, 2), (1536, 2), (2048, 2), (1280, 2)), 2),
            ("prefill", ((2048, 32),), 0))
_GPU_ITERS = 50


def _median_gpu(fn) -> float:
    """Median seconds of back-to-back calls, CUDA events (host overhead shows where it dominates)."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(_GPU_ITERS)]
    for start, stop in pairs:
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) / 1e3


def _eager(device, fn):
    """(seconds, result): median of N calls on a GPU after warm-up; one call's wall time on the CPU."""
    if device.type == "cpu":
        t0 = time.perf_counter()
        result = fn()
        return time.perf_counter() - t0, result
    result = fn()
    for _ in range(3):
        fn()
    return _median_gpu(fn), result


def _graph(fn):
    """(seconds per replay, result): `fn` captured once in a CUDA graph (every call can be:
    docs/contract.md, "CUDA graphs")."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    graph.replay()
    return _median_gpu(graph.replay), result


def _fmt_s(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-2 else f"{seconds:.2f} s"


def _run_step(device, name, seqs, pad, seed) -> list[str]:
    """One step of `run`; returns the failures (empty: PASS)."""
    p = problems.make_problem(**V4.geometry(), seqs=seqs, ratio=V4.ratio, pad_rows=pad,
                              generator=torch.Generator().manual_seed(seed), device=device)
    contexts = sorted({c for c, _ in seqs})
    span = f"{contexts[0]}..{contexts[-1]}" if len(contexts) > 1 else f"{contexts[0]}"
    print(f"\n== {name}: {p.num_seqs} sequence(s) x {p.max_qlen} rows (+{pad} padding rows), context "
          f"{span} tokens, CSA ratio {V4.ratio} -> up to {p.max_seq_len} keys; "
          f"H{p.heads} D{p.head_dim} page {p.page_size}")
    cfg = mqa_logits_mxfp4_config(device, heads=p.heads, head_dim=p.head_dim, page_size=p.page_size,
                                  max_rows=p.rows, max_seqs=p.num_seqs, max_qlen=p.max_qlen,
                                  max_seq_len=p.max_seq_len)
    print(cfg.explain())

    def free():
        return mqa_logits_mxfp4(*p.args(), cfg=cfg)

    def forward():  # what a forward does in Table mode: one schedule, then the op
        sched = mqa_logits_mxfp4_schedule(cfg, p.query_start_loc, p.row_ends)
        return mqa_logits_mxfp4(*p.args(), cfg=cfg, schedule=sched)

    sched = mqa_logits_mxfp4_schedule(cfg, p.query_start_loc, p.row_ends)
    times = {}
    times[f"{cfg.mode} (no schedule)"], out_free = _eager(device, free)
    times["schedule build"], _ = _eager(
        device, lambda: mqa_logits_mxfp4_schedule(cfg, p.query_start_loc, p.row_ends))
    times["table (with schedule)"], out_table = _eager(
        device, lambda: mqa_logits_mxfp4(*p.args(), cfg=cfg, schedule=sched))
    outs = {cfg.mode: out_free, "table": out_table}
    if device.type == "cuda":
        times[f"{cfg.mode}, graph replay"], outs[f"{cfg.mode} (graph)"] = _graph(free)
        times["schedule + table, graph"], outs["table (graph)"] = _graph(forward)
    t0 = time.perf_counter()
    ref = reference.mqa_logits_reference(*p.args(), max_seq_len=p.max_seq_len)
    times["reference (float64)"] = time.perf_counter() - t0

    failures = []
    for mode, out in outs.items():
        failures += [f"{mode}: {line}" for line in reference.compare_to_reference(out, ref)]
        if not torch.equal(out.view(torch.int32), out_free.view(torch.int32)):
            failures.append(f"{mode} is not bitwise identical to {cfg.mode}")
    live = p.live_rows
    outside = torch.cat([out_free[:live][~ref.window], out_free[live:].flatten()])
    if not bool((outside == float("-inf")).all()):
        failures.append("cells outside windows or in padding rows were written (expected -inf)")

    how = (f"median of {_GPU_ITERS} back-to-back calls or graph replays, CUDA events"
           if device.type == "cuda" else "one call, wall time")
    print(f"  timings ({how}; the reference: one call, wall time):")
    for what, seconds in times.items():
        print(f"    {what:<26} {_fmt_s(seconds)}")
    print(f"  checked: {', '.join(outs)} against the reference and bitwise against {cfg.mode}; "
          f"cells outside windows and padding rows untouched")
    for line in failures:
        print(f"  FAIL {line}")
    print(f"  {name}: {'PASS' if not failures else 'FAIL'}")
    return failures


def _cmd_run(args, parser) -> int:
    t0 = time.perf_counter()
    device = parse_device(args.device, parser)
    if device.type == "cpu":
        use_interpreter("run")
        from .backends.triton.backend import interpreting  # imports triton: after the switch above
        if not interpreting():
            raise SystemExit("error: the Triton kernels are not interpreted; set TRITON_INTERPRET=1")
    what = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (Triton interpreter)"
    print(f"mqa_logits_mxfp4 {__version__} run on {device} [{what}], torch {torch.__version__}, "
          f"seed {args.seed}")
    steps = _RUN_GPU if device.type == "cuda" else _RUN_CPU
    passed = True
    for name, seqs, pad in steps:
        try:
            passed &= not _run_step(device, name, seqs, pad, args.seed)
        except MqaLogitsError as e:
            print(f"  FAIL {name}: {type(e).__name__}: {e}")
            passed = False
    print(f"\nrun: {'PASS' if passed else 'FAIL'} ({len(steps)} steps, {time.perf_counter() - t0:.1f} s)")
    return 0 if passed else 1


# --- explain -------------------------------------------------------------------------------

def _cmd_explain(args, parser) -> int:
    bounds = dict(_BASE_BOUNDS)
    if args.model:
        model = MODELS[args.model]
        bounds.update(model.geometry(), max_seq_len=model.max_seq_len)
    for name in ("heads", "head_dim", "page_size", "pages_per_block", "gather", "max_seq_len"):
        if getattr(args, name) is not None:
            bounds[name] = getattr(args, name)
    device = parse_device(args.device, parser)
    if device.type == "cpu":
        use_interpreter("explain")
    max_rows = args.max_rows if args.max_rows is not None else args.max_seqs * args.max_qlen
    try:
        cfg = mqa_logits_mxfp4_config(device, max_rows=max_rows, max_seqs=args.max_seqs,
                                      max_qlen=args.max_qlen, batch_invariant=args.batch_invariant, **bounds)
    except MqaLogitsError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(cfg.explain())
    return 0


# --- isa -----------------------------------------------------------------------------------

def _cmd_isa(args, parser) -> int:
    if interpret_on():
        print("error: isa AOT-compiles the Triton kernels, which cannot be done when they are decorated "
              "under the interpreter; unset TRITON_INTERPRET (e.g. `env -u TRITON_INTERPRET "
              "mqa-logits-mxfp4 isa`)", file=sys.stderr)
        return 2
    return isa.run(args.target, args.mode, args.jobs, args.json)


# --- build ---------------------------------------------------------------------------------

def _cmd_build(args, parser) -> int:
    return jit.main((["--check"] if args.check else []) + (["--verbose"] if args.verbose else []))


# --- entry ---------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqa-logits-mxfp4",
                                description="MXFP4 paged MQA indexer logits (DeepSeek-V4 / V4.1).")
    p.add_argument("--version", action="version", version=f"mqa-logits-mxfp4 {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,explain,isa,build,tune,bench}")

    run = sub.add_parser("run", help="a small DeepSeek-V4 forward (decode + prefill) checked "
                         "against the reference, with the decision and timings")
    run.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu "
                     "through the Triton interpreter)")
    run.add_argument("--seed", type=int, default=0, help="random problem seed (default 0)")
    run.set_defaults(subparser=run)

    ex = sub.add_parser("explain", help="the backend/instance/mode picked for given bounds, and why")
    ex.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu; on "
                    "the CPU this sets TRITON_INTERPRET=1, as run does)")
    ex.add_argument("--model", choices=sorted(MODELS), help="a model's indexer geometry "
                    "(mqa_logits_mxfp4/models.py; docs/contract.md, \"Models\"); explicit options override it")
    ex.add_argument("--heads", type=int, help="default 64")
    ex.add_argument("--head-dim", type=int, help="default 128")
    ex.add_argument("--page-size", type=int, help="default 64")
    ex.add_argument("--pages-per-block", type=int, help="default 1")
    ex.add_argument("--gather", action=argparse.BooleanOptionalAction, default=None,
                    help="per-row block tables (default off)")
    ex.add_argument("--max-rows", type=int, help="default max-seqs x max-qlen")
    ex.add_argument("--max-seqs", type=int, default=1, help="default 1")
    ex.add_argument("--max-qlen", type=int, default=1, help="default 1")
    ex.add_argument("--max-seq-len", type=int, help="default 8192 (a model preset sets its own)")
    ex.add_argument("--batch-invariant", action="store_true",
                    help="only canonical instances: bitwise batch invariance (docs/numerics.md)")
    ex.set_defaults(subparser=ex)

    isa_cmd = sub.add_parser("isa", help="AOT-compile every Triton instance for its native targets "
                         "(no GPU needed): MMA instructions, registers, spills")
    isa_cmd.add_argument("--json", metavar="FILE", help="write the records as JSON")
    isa_cmd.add_argument("--target", action="append", choices=sorted(isa.ISA_TARGETS),
                         help=f"only this target (repeatable; default {', '.join(isa.ISA_DEFAULT_TARGETS)})")
    isa_cmd.add_argument("--mode", action="append", choices=sorted(isa.MODE_CODE),
                         help="only this mode (repeatable; default all)")
    isa_cmd.add_argument("--jobs", type=int, help="compile processes (default: CPU count)")
    isa_cmd.set_defaults(subparser=isa_cmd)

    build = sub.add_parser("build", help="build the opus extension into its cache ahead of first use "
                           "(CUDA or ROCm torch with nvcc / hipcc)", epilog=jit.EXIT_RULE)
    build.add_argument("--check", action="store_true", help="only report whether it is built; never build")
    build.add_argument("--verbose", action="store_true", help="show the compiler's commands")
    build.set_defaults(subparser=build)
    add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is not None:  # tune / bench (tuning/commands.py)
        return handler(args, args.subparser)
    command = {"run": _cmd_run, "explain": _cmd_explain, "isa": _cmd_isa, "build": _cmd_build}[args.command]
    return command(args, args.subparser)
