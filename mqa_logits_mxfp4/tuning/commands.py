"""`mqa-logits-mxfp4 tune` and `mqa-logits-mxfp4 bench` (docs/tuning.md).

`add_commands(subparsers)` registers both on the package CLI; each sets `handler(args, parser)
-> exit code` with `set_defaults`. `python3 -m mqa_logits_mxfp4.tuning.commands tune|bench ...`
runs them on their own (the tuner's per-GPU worker processes are started that way).

On the CPU the Triton kernels run only through the interpreter, so a CPU device sets
TRITON_INTERPRET=1 before the kernels are imported (devices.py; nothing here imports them).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..core.errors import TableError
from ..core.modes import MODES
from ..core.outputs import OUT_DTYPES
from ..devices import command_device as _device
from ..dispatch import registry, table
from . import timing
from .bench import bench, write_csv
from .report import plot
from .suites import SUITES, get_suite, parse_shard, select, shard
from .tables import merge_tables
from .tuner import Tuner, tune, verify

OUT_DTYPE_OF = {str(d).removeprefix("torch."): d for d in OUT_DTYPES}  # --out-dtype's choices


# --- shared --------------------------------------------------------------------------------

def _shapes(args, parser):
    shapes = []
    for name in args.suite:
        try:
            shapes += get_suite(name).shapes(quick=args.quick)
        except KeyError as e:
            parser.error(str(e.args[0]))
    shapes = select(shapes, args.only)
    try:
        if args.shard:
            shapes = shard(shapes, *parse_shard(args.shard))
        if getattr(args, "local_shard", None):
            shapes = shard(shapes, *parse_shard(args.local_shard))
    except ValueError as e:
        parser.error(str(e))
    return shapes


def _print_shapes(shapes) -> None:
    for s in shapes:
        g = " gather" if s.gather else ""
        print(f"{s.suite:14s} {s.name:44s} H{s.heads} page {s.page_size}x{s.pages_per_block}{g} "
              f"rows {s.max_rows} seqs {s.max_seqs} qlen {s.max_qlen} seq_len {s.max_seq_len} "
              f"layers {s.layers}{' quick' if s.quick else ''}")
    print(f"{len(shapes)} shapes")


def _backends(args, parser):
    if not args.backend:
        return None
    bad = [b for b in args.backend if b not in registry.names()]
    if bad:
        parser.error(f"--backend {bad[0]!r} is not a backend; valid: {', '.join(registry.names())}")
    return [registry.get(b) for b in args.backend]


def _tuner(args, device, parser, *, top: int, torch_path: bool, on_event=None, batch_invariant: bool = False):
    return Tuner(device, backends=_backends(args, parser), instances=set(args.instance or ()) or None,
                 modes=set(args.mode or ()) or None, iters=args.iters, budget_ms=args.budget_ms, top=top,
                 rounds=args.rounds, torch_path=torch_path, on_event=on_event, data=args.data,
                 out_dtype=OUT_DTYPE_OF[args.out_dtype], batch_invariant=batch_invariant)


def _event_log(path):
    """on_event writing one JSON line a record to `path` (None: no log)."""
    if not path:
        return None, lambda: None
    f = open(path, "a")

    def on_event(record):
        f.write(json.dumps(record) + "\n")
        f.flush()
    return on_event, f.close


def _setup_logging(tag: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[{tag}] %(message)s" if tag else "%(message)s"))
    logger = logging.getLogger("mqa_logits_mxfp4.tuning")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING)
    logger.propagate = False


class Progress:
    """A tqdm bar where tqdm is installed (and this is not a worker), else one line a shape."""

    def __init__(self, what: str, tag: str | None = None):
        self.what, self.tag, self.bar = what, tag, None

    def __call__(self, shapes):
        self.total, self.done, self.t0 = len(shapes), 0, time.perf_counter()
        if self.tag is None:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=self.total, desc=self.what, unit="shape", dynamic_ncols=True)
            except ImportError:
                pass
        return iter(shapes)

    def report(self, shape, result) -> None:
        self.done += 1
        best = result.best
        pick = f"best {best.candidate.label} {best.us:.2f} us" if best else "NO PASSING CANDIDATE"
        torch_us = f", torch path {result.ref_us:.1f} us" if result.ref_us is not None else ""
        bands = ", reference on row bands" if result.banded else ""
        line = (f"[{self.done}/{self.total}] {shape.name}: {pick} ({len(result.timed)} timed, "
                f"{len(result.rejected)} rejected{bands}{torch_us}) {time.perf_counter() - self.t0:.0f} s")
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(line)
        else:
            print(f"[{self.tag}] {line}" if self.tag else line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _common(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--quick", action="store_true", help="the suite's quick subset")
    p.add_argument("--only", action="append", metavar="TEXT",
                   help="only shapes whose name contains TEXT (repeatable: any of them)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu through the "
                   "Triton interpreter)")
    p.add_argument("--backend", action="append", help="only this backend (repeatable)")
    p.add_argument("--instance", action="append", help="only this instance (repeatable)")
    p.add_argument("--mode", action="append", choices=MODES, help="only this mode (repeatable)")
    p.add_argument("--iters", type=int, default=30, help="timed calls a candidate gets at most (default 30; "
                   "fewer for slow calls, about --budget-ms of them, at least 5)")
    p.add_argument("--budget-ms", type=float, default=1000.0, help="time a candidate is sampled for (default 1000)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the re-timing (default 5)")
    p.add_argument("--no-torch-path", action="store_true", help=f"do not time the torch path ({what})")
    p.add_argument("--shard", metavar="I/N", help="only shard I of N (0-based) of the shapes: every N-th "
                   "from I, e.g. --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT")
    p.add_argument("--list", action="store_true", help="print the shapes (after --quick/--only/--shard) and exit")
    p.add_argument("--log", metavar="FILE", help="append every candidate's outcome (skipped / rejected with "
                   "reasons / timed) as JSON lines")
    p.add_argument("--out-dtype", choices=tuple(OUT_DTYPE_OF), default="float32",
                   help="the out every candidate writes (default float32; bfloat16 / float16: the float32 "
                   "result rounded once, 2 bytes a cell)")
    p.add_argument("--data", choices=("realistic", "wide"), default="realistic",
                   help="the problems' scale layout (default realistic: a vector's block scales within 2 "
                   "binades, as quantized activations have; wide: every byte uniform over 24 binades, the "
                   "canonical paths' case; problems.DATA_KINDS)")


# --- tune ----------------------------------------------------------------------------------

def _default_output(suite_name: str, parser) -> Path:
    model = get_suite(suite_name).model
    if model is None:
        parser.error(f"suite {suite_name} fills no model table: name the output with -o")
    return table.CONFIG_DIR / "models" / f"{model}.csv"


def _workers(args, device, parser) -> int:
    if args.workers in (None, "auto"):
        explicit_index = args.device is not None and device.index is not None
        return torch.cuda.device_count() if device.type == "cuda" and not explicit_index else 1
    try:
        n = int(args.workers)
    except ValueError:
        n = 0
    if n < 1:
        parser.error(f"--workers must be a positive int or auto; got {args.workers!r}")
    if device.type == "cuda" and n > torch.cuda.device_count():
        parser.error(f"--workers {n}: only {torch.cuda.device_count()} GPUs are visible")
    return n


def _child_argv(args, output: Path, part: Path, g: int, n: int, tag: str, device: str) -> list[str]:
    argv = ["tune", "-o", str(part), "--workers", "1", "--device", device, "--local-shard", f"{g}/{n}",
            "--worker-tag", tag, "--skip-done", str(output), "--iters", str(args.iters),
            "--budget-ms", str(args.budget_ms), "--rounds", str(args.rounds), "--top", str(args.top),
            "--data", args.data, "--out-dtype", args.out_dtype]
    for s in args.suite:
        argv += ["--suite", s]
    for flag, on in (("--quick", args.quick), ("--no-torch-path", args.no_torch_path)):
        if on:
            argv.append(flag)
    for opt, values in (("--only", args.only), ("--backend", args.backend), ("--instance", args.instance),
                        ("--mode", args.mode), ("--skip-done", args.skip_done)):
        for v in values or ():
            argv += [opt, v]
    if args.shard:
        argv += ["--shard", args.shard]
    if args.log:
        argv += ["--log", f"{args.log}.{tag}"]
    return argv


def _spawn_workers(args, n: int, device, output: Path) -> int:
    """One process per GPU (or n CPU processes), each on its share; their tables merged into output."""
    if device.type == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(n)]
    procs, parts = [], []
    print(f"tune: {n} worker processes on {device.type}, one shard of the shapes each", flush=True)
    try:
        for g in range(n):
            tag = f"{device.type}{g}"
            part = output.with_name(f"{output.name}.{tag}.part")  # not *.csv: no table glob takes it
            parts.append(part)
            env = dict(os.environ)
            if device.type == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = ids[g]
            argv = _child_argv(args, output, part, g, n, tag, "cuda:0" if device.type == "cuda" else "cpu")
            procs.append(subprocess.Popen([sys.executable, "-m", "mqa_logits_mxfp4.tuning.commands", *argv], env=env))
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        raise
    present = [p for p in parts if p.exists() and p.stat().st_size]
    inputs = ([output] if output.exists() and output.stat().st_size else []) + present
    if inputs:
        rows = merge_tables(inputs, output)
        for p in present:
            p.unlink()
        print(f"tune: merged {len(present)} worker tables into {output} ({rows} rows)")
    failed = [g for g, c in enumerate(codes) if c]
    if failed:
        print(f"tune: workers {failed} exited with {[codes[g] for g in failed]}", file=sys.stderr)
    return 1 if failed else 0


def cmd_tune(args, parser) -> int:
    if getattr(args, "tune_command", None) == "merge":
        return cmd_merge(args, parser)
    _setup_logging(args.worker_tag)
    if args.verify:
        return _cmd_verify(args, parser)
    if not args.suite:
        parser.error("--suite is required (or --verify FILE, or tune merge A.csv B.csv -o OUT.csv)")
    if len(args.suite) > 1:
        parser.error("tune writes one model's table: give one --suite")
    shapes = _shapes(args, parser)
    if args.list:
        _print_shapes(shapes)
        return 0
    output = Path(args.output) if args.output else _default_output(args.suite[0], parser)
    device = _device(args.device, parser)
    workers = _workers(args, device, parser)
    if workers > 1:
        return _spawn_workers(args, workers, device, output)
    on_event, close_log = _event_log(args.log)
    tuner = _tuner(args, device, parser, top=args.top, torch_path=not args.no_torch_path, on_event=on_event)
    progress = Progress(f"tune {args.suite[0]}", args.worker_tag)
    print(f"tune {args.suite[0]}{' (quick)' if args.quick else ''}: {len(shapes)} shapes on {device} -> {output}",
          flush=True)
    try:
        summary = tune(shapes, output, tuner, skip_files=args.skip_done or (), progress=progress)
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        progress.close()
        close_log()
    tag = f"[{args.worker_tag}] " if args.worker_tag else ""
    failed = f": {', '.join(summary.failed)}" if summary.failed else ""
    print(f"{tag}tune: {len(summary.tuned)} shapes tuned, {len(summary.already)} already in the table(s), "
          f"{len(summary.failed)} without a passing candidate{failed}")
    return 1 if summary.failed else 0


def _cmd_verify(args, parser) -> int:
    device = _device(args.device, parser)
    on_event, close_log = _event_log(args.log)
    tuner = _tuner(args, device, parser, top=args.top, torch_path=False, on_event=on_event)

    def show(v):
        now = f"{v.now_us:.2f} us ({v.ratio - 1:+.1%})" if v.ratio is not None else "-"
        flag = "OFF" if v.off(args.tolerance) else "ok "
        print(f"{flag} {v.source} {v.pick}: tuned {v.tuned_us:.2f} us, now {now}"
              + (f" [{v.problem}]" if v.problem else ""), flush=True)

    try:
        rows, skipped = verify(args.verify, tuner, args.tolerance, on_row=show)
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        close_log()
    for line in skipped:
        print(f"skip {line}")
    if not rows:
        print(f"verify: no row of {args.verify} was made on this device's arch and SM count")
        return 1
    within = sum(not v.off(args.tolerance) for v in rows)
    share = within / len(rows)
    print(f"verify: {within}/{len(rows)} rows within {args.tolerance:.0%} ({share:.0%}; pass at "
          f">= {args.verify_pass:.0%}); {len(skipped)} rows of other devices skipped")
    return 0 if share >= args.verify_pass else 1


def cmd_merge(args, parser) -> int:
    try:
        rows = merge_tables(args.inputs, args.output)
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"tune merge: {rows} rows from {len(args.inputs)} files into {args.output}")
    return 0


# --- bench ---------------------------------------------------------------------------------

def cmd_bench(args, parser) -> int:
    _setup_logging(None)
    args.suite = args.suite or ["deepseek_v4"]
    shapes = _shapes(args, parser)
    if args.list:
        _print_shapes(shapes)
        return 0
    device = _device(args.device, parser)
    csv_path = Path(args.csv)
    png = Path(args.png) if args.png else csv_path.with_suffix(".png")
    if device.type == "cuda":
        ceil = timing.ceilings(device)
        what = torch.cuda.get_device_name(device)
    else:  # numbers for the interpreter's sake only: small sizes
        ceil = timing.ceilings(device, copy_bytes=64 << 20, matmul_n=512, iters=3)
        what = "cpu (Triton interpreter)"
    print(f"bench on {device} [{what}]: ceilings measured now: "
          + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in ceil.items()), flush=True)
    on_event, close_log = _event_log(args.log)
    tuner = _tuner(args, device, parser, top=args.top, torch_path=not args.no_torch_path, on_event=on_event,
                   batch_invariant=args.batch_invariant)
    progress = Progress("bench")
    try:
        rows = bench(shapes, tuner, ceil, best_only=args.best, progress=progress, peer=args.peer)
    finally:
        progress.close()
        close_log()
    write_csv(csv_path, rows)
    print(f"wrote {csv_path} ({len(rows)} rows)")
    print(plot(rows, png, str(csv_path)))
    failed = [r for r in rows if r["status"] in ("rejected", "error")]
    for r in failed:
        what = f"{r['backend']}/{r['instance']}/{r['mode']}" if r["status"] == "rejected" else "error"
        print(f"FAIL {r['shape']} {what}: {r['note'][:300]}")
    return 1 if failed else 0


# --- registration --------------------------------------------------------------------------

def add_commands(subparsers) -> None:
    """Register `tune` (with `tune merge`) and `bench` on the CLI's subparsers."""
    suites = ", ".join(f"{n} ({s.description})" for n, s in SUITES.items())
    tune = subparsers.add_parser(
        "tune", help="tune a model's table: check every candidate against the reference, time it, keep the "
        "fastest (also: --verify FILE, tune merge)",
        description="For each shape of a suite, every candidate (backend x instance x mode) is checked "
        "against the float64 reference, timed (cold L2, median), the fastest re-timed interleaved; the best "
        "becomes the shape's batch_invariant=0 row, the best canonical one its batch_invariant=1 row (one "
        "measurement, picked twice). Resumable: shapes already in the output are skipped. Suites: " + suites)
    tune.add_argument("--suite", action="append", choices=sorted(SUITES), help="the shape suite")
    tune.add_argument("-o", "--output", help="the table to write (default: the package's "
                      "configs/models/<model>.csv)")
    tune.add_argument("--workers", help="processes, one a GPU (default auto: every visible GPU when --device "
                      "names no index; 1 on the CPU)")
    tune.add_argument("--top", type=int, default=3, help="how many of the fastest are re-timed interleaved (default 3)")
    tune.add_argument("--verify", metavar="FILE", help="re-time every row of FILE made on this device's arch "
                      "and SM count; report rows off by more than --tolerance")
    tune.add_argument("--tolerance", type=float, default=0.10, help="--verify: relative difference that flags a row "
                      "(default 0.10)")
    tune.add_argument("--verify-pass", type=float, default=0.90, help="--verify: exit 0 when at least this share "
                      "of rows is within tolerance (default 0.90)")
    tune.add_argument("--skip-done", action="append", metavar="FILE", help="also skip shapes whose key is in FILE")
    tune.add_argument("--local-shard", help=argparse.SUPPRESS)
    tune.add_argument("--worker-tag", help=argparse.SUPPRESS)
    _common(tune, "the rows' ref_us stays empty")
    tune.set_defaults(handler=cmd_tune, subparser=tune)
    sub = tune.add_subparsers(dest="tune_command", metavar="{merge}")
    merge = sub.add_parser("merge", help="combine tables (shard outputs) into one; a key in two inputs is an "
                           "error naming both")
    merge.add_argument("inputs", nargs="+", metavar="TABLE.csv")
    merge.add_argument("-o", "--output", required=True, help="the merged table (if it exists it must be an input)")
    merge.set_defaults(handler=cmd_tune, subparser=merge, tune_command="merge")

    bench = subparsers.add_parser(
        "bench", help="benchmark suites: us, GB/s, TFLOP/s and roofline fraction per candidate, with the torch "
        "path; CSV and PNG",
        description="Per shape and candidate (or the best per backend): checked against the reference first, "
        "then timed (cold L2, median); roofline floor from ceilings measured in the same run. Suites: " + suites)
    bench.add_argument("--suite", action="append", choices=sorted(SUITES),
                       help="shape suite (repeatable; default deepseek_v4)")
    bench.add_argument("--csv", default="bench.csv", help="the CSV to write (default bench.csv)")
    bench.add_argument("--png", help="the plot (default: the CSV's name with .png)")
    bench.add_argument("--best", action="store_true", help="one row per backend and shape: its best candidate")
    bench.add_argument("--top", type=int, default=0, help="re-time the N fastest of each shape interleaved (default 0)")
    bench.add_argument("--peer", choices=("deepgemm",), help="also time DeepGEMM's FP8 MQA logits (paged; contiguous "
                       "for a prefill) on each problem (where deep_gemm imports and serves the shape), interleaved with our fastest "
                       "candidate; every row gets vs_peer = its time / the peer's (docs/tuning.md)")
    bench.add_argument("--batch-invariant", action="store_true", help="every shape as a batch_invariant=True "
                       "config: only canonical instances are candidates (docs/numerics.md)")
    _common(bench, "no torch rows")
    bench.set_defaults(handler=cmd_bench, subparser=bench, local_shard=None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m mqa_logits_mxfp4.tuning.commands",
                                description="mqa_logits_mxfp4 tune and bench")
    sub = p.add_subparsers(dest="command", required=True, metavar="{tune,bench}")
    add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    return args.handler(args, args.subparser)


if __name__ == "__main__":
    sys.exit(main())
