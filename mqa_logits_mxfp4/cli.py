"""Command line: `mqa-logits-mxfp4 run | explain | isa | build` (also `python -m mqa_logits_mxfp4`).

- run: a small DeepSeek-V4-shaped forward (a decode step and a prefill) on the best device
  present, checked against the float64 reference, with the decision and timings printed.
- explain: the dispatcher's decision for given static bounds (or a model preset).
- isa: AOT-compiles every Triton instance for its native targets (no GPU needed) and checks
  which MMA instructions appear, registers and spills.
- build: builds the opus extension into its cache ahead of first use (or `--check`s the cache).

On the CPU, Triton kernels run only through the interpreter, so `run` and `explain` set
TRITON_INTERPRET=1 for a CPU device before the kernels are imported (they are imported lazily
on first use). `isa` needs the opposite: decorated kernels cannot be AOT-compiled under the
interpreter, so it refuses to run when TRITON_INTERPRET is on.

Heavy imports (torch, triton, the package) happen inside the commands: argument errors are
reported before any of them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# --- shared --------------------------------------------------------------------------------

_TRUE = ("1", "true", "yes", "on", "y")

# SPEC section 9: geometry of each model's indexer layers (heads, head_dim, page x pages, gather)
# and a default key bound for `explain`.
MODELS = {
    "deepseek_v4": dict(heads=64, head_dim=128, page_size=64, pages_per_block=1, gather=False,
                        max_seq_len=65536),
    "deepseek_v4_1": dict(heads=32, head_dim=128, page_size=8, pages_per_block=32, gather=False,
                          max_seq_len=65536),
    "deepseek_v4_1_candidate": dict(heads=32, head_dim=128, page_size=8, pages_per_block=1,
                                    gather=True, max_seq_len=16384),
}
_BASE_BOUNDS = dict(heads=64, head_dim=128, page_size=64, pages_per_block=1, gather=False,
                    max_seq_len=8192)


def _interpret_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def _use_interpreter(why: str) -> None:
    """Switch Triton to its interpreter; must happen before the kernels module is imported."""
    if "mqa_logits_mxfp4.backends.triton.kernels" in sys.modules and not _interpret_on():
        raise SystemExit("error: the Triton kernels were already imported without TRITON_INTERPRET=1; "
                         "set it in the environment to run on the CPU")
    if not _interpret_on():
        print(f"{why}: device cpu, so setting TRITON_INTERPRET=1 (Triton kernels run on the CPU only "
              "through its interpreter)", file=sys.stderr)
    os.environ["TRITON_INTERPRET"] = "1"


def _device(name: str | None, parser: argparse.ArgumentParser):
    import torch
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        parser.error(f"--device: {e}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda[:N]; got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {name}: torch sees no CUDA/ROCm device here (torch {torch.__version__})")
    return device


# --- run -----------------------------------------------------------------------------------

# (step, sequences as (context tokens, rows), graph-padding rows); CSA ratio 4 everywhere.
_RUN_GPU = (("decode", ((2048, 2), (4096, 2), (6144, 2), (8192, 2)), 4),
            ("prefill", ((8192, 512),), 0))
_RUN_CPU = (("decode", ((1024, 2), (1536, 2), (2048, 2), (1280, 2)), 2),
            ("prefill", ((2048, 32),), 0))
_GPU_ITERS = 50


def _median_gpu(fn) -> float:
    """Median seconds of back-to-back calls, CUDA events (host overhead shows where it dominates)."""
    import torch
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
    """(seconds per replay, result): `fn` captured once in a CUDA graph (SPEC: every call can be)."""
    import torch
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


def _run_step(mx, problems, reference, torch, device, name, seqs, pad, seed) -> list[str]:
    """One step of `run`; returns the failures (empty: PASS)."""
    p = problems.make_problem(heads=64, head_dim=128, page_size=64, seqs=seqs, ratio=4, pad_rows=pad,
                              generator=torch.Generator().manual_seed(seed), device=device)
    contexts = sorted({c for c, _ in seqs})
    span = f"{contexts[0]}..{contexts[-1]}" if len(contexts) > 1 else f"{contexts[0]}"
    print(f"\n== {name}: {p.num_seqs} sequence(s) x {p.max_qlen} rows (+{pad} padding rows), context "
          f"{span} tokens, CSA ratio 4 -> up to {p.max_seq_len} keys; "
          f"H{p.heads} D{p.head_dim} page {p.page_size}")
    cfg = mx.mqa_logits_mxfp4_config(device, heads=p.heads, head_dim=p.head_dim, page_size=p.page_size,
                                     max_rows=p.rows, max_seqs=p.num_seqs, max_qlen=p.max_qlen,
                                     max_seq_len=p.max_seq_len)
    print(cfg.explain())

    def free():
        return mx.mqa_logits_mxfp4(*p.args(), cfg=cfg)

    def forward():  # what a forward does in Table mode: one schedule, then the op
        sched = mx.mqa_logits_mxfp4_schedule(cfg, p.query_start_loc, p.row_ends)
        return mx.mqa_logits_mxfp4(*p.args(), cfg=cfg, schedule=sched)

    sched = mx.mqa_logits_mxfp4_schedule(cfg, p.query_start_loc, p.row_ends)
    times = {}
    times[f"{cfg.mode} (no schedule)"], out_free = _eager(device, free)
    times["schedule build"], _ = _eager(
        device, lambda: mx.mqa_logits_mxfp4_schedule(cfg, p.query_start_loc, p.row_ends))
    times["table (with schedule)"], out_table = _eager(
        device, lambda: mx.mqa_logits_mxfp4(*p.args(), cfg=cfg, schedule=sched))
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
    device = _device(args.device, parser)
    if device.type == "cpu":
        _use_interpreter("run")
    import torch

    import mqa_logits_mxfp4 as mx
    from . import problems, reference

    if device.type == "cpu":
        from .backends.triton.backend import interpreting
        if not interpreting():
            raise SystemExit("error: the Triton kernels are not interpreted; set TRITON_INTERPRET=1")
    what = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (Triton interpreter)"
    print(f"mqa_logits_mxfp4 {mx.__version__} run on {device} [{what}], torch {torch.__version__}, "
          f"seed {args.seed}")
    steps = _RUN_GPU if device.type == "cuda" else _RUN_CPU
    passed = True
    for name, seqs, pad in steps:
        try:
            passed &= not _run_step(mx, problems, reference, torch, device, name, seqs, pad, args.seed)
        except mx.MqaLogitsError as e:
            print(f"  FAIL {name}: {type(e).__name__}: {e}")
            passed = False
    print(f"\nrun: {'PASS' if passed else 'FAIL'} ({len(steps)} steps, {time.perf_counter() - t0:.1f} s)")
    return 0 if passed else 1


# --- explain -------------------------------------------------------------------------------

def _cmd_explain(args, parser) -> int:
    bounds = dict(_BASE_BOUNDS)
    if args.model:
        bounds.update(MODELS[args.model])
    for name in ("heads", "head_dim", "page_size", "pages_per_block", "gather", "max_seq_len"):
        if getattr(args, name) is not None:
            bounds[name] = getattr(args, name)
    device = _device(args.device, parser)
    if device.type == "cpu":
        _use_interpreter("explain")
    import mqa_logits_mxfp4 as mx

    max_rows = args.max_rows if args.max_rows is not None else args.max_seqs * args.max_qlen
    try:
        cfg = mx.mqa_logits_mxfp4_config(device, max_rows=max_rows, max_seqs=args.max_seqs,
                                         max_qlen=args.max_qlen, **bounds)
    except mx.MqaLogitsError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(cfg.explain())
    return 0


# --- isa -----------------------------------------------------------------------------------

# name -> (GPUTarget arguments, shared-memory budget in bytes). Each target compiles every
# instance whose `arches` name it.
ISA_TARGETS = {
    "sm_90": (("cuda", 90, 32), 232448),
    "gfx950": (("hip", "gfx950", 64), 163840),
    "sm_100": (("cuda", 100, 32), 232448),
}
ISA_DEFAULT_TARGETS = ("sm_90", "gfx950")  # sm_100 on request
# (target, MMA kind) -> the instruction that must appear. Kinds are the kernel's MMA constexpr
# (backend._MMA maps family names to them): 0 fp8 operands, 1 16-bit float operands, 2 dot_scaled.
EXPECTED_MMA = {
    ("sm_90", 0): r"QGMMA\.",
    ("sm_90", 1): r"HGMMA\.",
    ("gfx950", 0): r"v_mfma_f32_\d+x\d+x\d+_fp8_fp8",
    ("gfx950", 1): r"v_mfma_f32_\d+x\d+x\d+_b?f16",
    ("gfx950", 2): r"v_mfma_scale_f32_\d+x\d+x\d+_f8f6f4",
    ("sm_100", 0): r"UTCQMMA",
    ("sm_100", 1): r"UTCHMMA",
    ("sm_100", 2): r"UTCOMMA",  # native MXFP4 tcgen05 (kind::mxf4), not an emulation
}
# (instance, target) -> why its spill is accepted for now, with what `isa` measured and the
# triton version. Every other (instance, target) is production: a spill there fails the command.
# Empty: no instance spilled at sm_90 / gfx950 under triton 3.9.0 (CI's).
EXPECTED_SPILLS: dict[tuple[str, str], str] = {}
# (mode, SEQ_P2): SEQ_P2 (next_power_of_2(max_seqs)) shapes Free mode's work split and moves
# register use a lot, so Free compiles for a small and a large decode batch; Prefill ignores it.
ISA_VARIANTS = (("free", 4), ("free", 64), ("prefill", 64))
_MODE_CODE = {"free": 1, "prefill": 2}
_ISA_HEADS = 64

# mqa_logits_kernel's runtime arguments as backend.launch() passes them for a non-flat output:
# oo_ptr and sched_ptr receive row_ends (int32) there; Python ints below 2^31 specialize to i32.
_SIGNATURE = {"q_ptr": "*u8", "qs_ptr": "*u8", "kv_ptr": "*u8", "ks_ptr": "*u8", "w_ptr": "*fp32",
              "bt_ptr": "*i32", "qsl_ptr": "*i32", "re_ptr": "*i32", "out_ptr": "*fp32",
              "oo_ptr": "*i32", "sched_ptr": "*i32", "num_seqs": "i32", "stride_w": "i32",
              "stride_bt": "i32", "stride_out": "i32", "parts": "i32"}
# The JIT marks 16-aligned pointers and ints divisible by 16 (which changes register use). The
# strides are in the usual case: heads (64), the table width and max_seq_len multiples of 16.
_DIVISIBLE = [name for name, ty in _SIGNATURE.items() if ty.startswith("*")] + [
    "stride_w", "stride_bt", "stride_out"]


def isa_jobs(targets=None, modes=None) -> list[dict]:
    """Every (instance, target, mode, SEQ_P2) the isa command compiles, at heads 64 where the
    instance serves 64 heads, else at the most heads it serves."""
    from .backends.triton.backend import _MMA
    from .backends.triton.instances import INSTANCES
    import torch

    from .backends.triton.backend import BACKEND
    from .dispatch.config import ProblemKey

    def heads_for(inst, target):
        """Heads 64 where the backend admits the instance there, else the most it admits."""
        fits = [h for h in inst.heads if not BACKEND.instance_supports(inst, ProblemKey(
            torch.device("cpu"), target, 1, h, 128, 64, 1, False, 64, 64, 1, 4096))]
        return _ISA_HEADS if _ISA_HEADS in fits else max(fits, default=None)

    jobs = []
    for target in targets or ISA_DEFAULT_TARGETS:
        for inst in INSTANCES:
            heads = heads_for(inst, target) if target in inst.arches else None
            if heads is None:
                continue
            for mode, seq_p2 in ISA_VARIANTS:
                if not modes or mode in modes:
                    jobs.append(dict(instance=inst.name, heads=heads, family=inst.family, mma_kind=_MMA[inst.family],
                                     rows=inst.rows, block_n=inst.block_n, warps=inst.warps,
                                     stages=inst.stages, target=target, mode=mode, seq_p2=seq_p2))
    return jobs


def _cuda_resources(cubin: bytes) -> dict:
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout
    found = {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", text)}
    return dict(regs=found["REG"], stack_bytes=found["STACK"], local_bytes=found["LOCAL"],
                spill_bytes=found["STACK"] + found["LOCAL"],
                spills_any=found["STACK"] > 0 or found["LOCAL"] > 0)


def _amd_resources(gcn: str) -> dict:
    def field(name):
        m = re.search(rf"\.{name}:\s+(\d+)", gcn)
        return int(m.group(1)) if m else None
    rec = dict(regs=field("vgpr_count"), agprs=field("agpr_count"), sgprs=field("sgpr_count"),
               vgpr_spills=field("vgpr_spill_count"), sgpr_spills=field("sgpr_spill_count"),
               private_bytes=field("private_segment_fixed_size"))
    rec["spill_bytes"] = rec["private_bytes"] or 0
    rec["spills_any"] = bool(rec["vgpr_spills"] or rec["sgpr_spills"] or rec["private_bytes"])
    return rec


def compile_isa(job: dict) -> dict:
    """AOT-compile one job of isa_jobs() in this process and measure it (no GPU needed)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .backends.triton import kernels

    rec = dict(job)
    kernel = kernels.mqa_logits_kernel
    if not hasattr(kernel, "cache_key"):
        rec["error"] = "mqa_logits_kernel was decorated under TRITON_INTERPRET=1; cannot AOT-compile"
        return rec
    # the constexprs backend.launch() passes, at a production tile
    consts = dict(HEADS=job["heads"], LOG2_H=job["heads"].bit_length() - 1, D=128, PAGE=64, PPB=1,
                  GATHER=False, R=job["rows"], BLOCK_N=job["block_n"], MMA=job["mma_kind"],
                  MODE=_MODE_CODE[job["mode"]], SEQ_P2=job["seq_p2"], FLAT_OUT=False,
                  INTERP=False)
    signature = dict(_SIGNATURE, **{name: "constexpr" for name in consts})
    attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in _DIVISIBLE}
    target_args, shared_budget = ISA_TARGETS[job["target"]]
    t0 = time.perf_counter()
    try:
        ck = triton.compile(ASTSource(kernel, signature, constexprs=consts, attrs=attrs),
                            target=GPUTarget(*target_args),
                            options=dict(num_warps=job["warps"], num_stages=job["stages"],
                                         enable_fp_fusion=False))
    except Exception as e:  # a compiler failure is a result to report, with its message
        lines = str(e).strip().splitlines()
        rec["error"] = f"{type(e).__name__}: {lines[0] if lines else ''}"
        return rec
    rec["compile_s"] = round(time.perf_counter() - t0, 2)
    rec["shared_bytes"] = ck.metadata.shared
    rec["shared_ok"] = ck.metadata.shared <= shared_budget
    if "cubin" in ck.asm:
        code = ck.asm["sass"]
        rec["mma"] = sorted(set(re.findall(r"\b[A-Z]*MMA(?:\.\w+)*", code)))
        rec["traps"] = len(re.findall(r"\bBPT\.TRAP\b", code))  # info: a body that is only a trap has no MMA
        rec.update(_cuda_resources(ck.asm["cubin"]))
    else:
        code = ck.asm["amdgcn"]
        rec["mma"] = sorted(set(re.findall(r"\bv_(?:mfma|wmma|smfmac)\w*", code)))
        rec["traps"] = len(re.findall(r"^\s*s_trap\b", code, re.M))
        rec.update(_amd_resources(code))
    pattern = EXPECTED_MMA.get((job["target"], job["mma_kind"]))
    rec["mma_expected"] = pattern
    rec["mma_ok"] = pattern is None or re.search(pattern, code) is not None
    return rec


def _judge(rec: dict) -> list[str]:
    """Why a record fails the isa check (empty: it passes)."""
    if "error" in rec:
        return [f"compile failed: {rec['error']}"]
    bad = []
    if not rec["mma_ok"]:
        bad.append(f"expected MMA /{rec['mma_expected']}/ missing; found {rec['mma'] or 'none'}")
    if rec["spills_any"] and rec["production"]:
        bad.append(f"production instance spills {rec['spill_bytes']} B")
    if not rec["shared_ok"]:
        bad.append(f"shared memory {rec['shared_bytes']} B over the {rec['target']} budget")
    return bad


def _isa_table(records: list[dict]) -> str:
    head = (f"{'instance':<18} {'heads':<5} {'target':<7} {'mode':<8} {'SEQ_P2':>6} {'regs':>5} {'spill B':>8} "
            f"{'shared B':>9} {'compile':>8}  {'MMA':<32} status")
    lines = [head, "-" * len(head)]
    for r in records:
        where = f"{r['instance']:<18} H{r['heads']:<4} {r['target']:<7} {r['mode']:<8} {r['seq_p2']:>6}"
        if "error" in r:
            lines.append(f"{where} FAIL {r['error']}")
            continue
        status = "; ".join(r["problems"]) or "ok"
        if r["spills_any"] and not r["production"] and not r["problems"]:
            status = "ok: known spill (EXPECTED_SPILLS)"
        lines.append(f"{where} {r['regs']:>5} {r['spill_bytes']:>8} {r['shared_bytes']:>9} "
                     f"{r['compile_s']:>7.1f}s  {','.join(r['mma'])[:32]:<32} {status}")
    return "\n".join(lines)


def _cmd_isa(args, parser) -> int:
    if _interpret_on():
        print("error: isa AOT-compiles the Triton kernels, which cannot be done when they are decorated "
              "under the interpreter; unset TRITON_INTERPRET (e.g. `env -u TRITON_INTERPRET "
              "mqa-logits-mxfp4 isa`)", file=sys.stderr)
        return 2
    import triton
    jobs = isa_jobs(args.target, args.mode)
    t0 = time.perf_counter()
    workers = max(1, min(args.jobs or os.cpu_count() or 1, len(jobs)))
    print(f"isa: {len(jobs)} compiles of mqa_logits_kernel (heads 64, or the most an instance serves; D128 page 64), triton "
          f"{triton.__version__}, {workers} process(es)", flush=True)
    if workers == 1:
        records = [compile_isa(job) for job in jobs]
    else:
        import concurrent.futures
        import multiprocessing
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked compiler state
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            records = list(pool.map(compile_isa, jobs))
    for rec in records:
        rec["production"] = (rec["instance"], rec["target"]) not in EXPECTED_SPILLS
        rec["problems"] = _judge(rec)
    wall = time.perf_counter() - t0
    print(_isa_table(records))
    for (name, target), why in EXPECTED_SPILLS.items():
        seen = [r for r in records if (r["instance"], r["target"]) == (name, target) and "error" not in r]
        if seen and not any(r["spills_any"] for r in seen):
            print(f"note: {name} on {target} is in EXPECTED_SPILLS ({why}) but no longer spills")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(triton=triton.__version__, wall_s=round(wall, 1), records=records), f, indent=1)
    failed = [r for r in records if r["problems"]]
    verdict = "FAIL" if failed else "PASS"
    print(f"isa: {verdict} ({len(records) - len(failed)}/{len(records)} ok, {wall:.1f} s)")
    return 1 if failed else 0


# --- build ---------------------------------------------------------------------------------

def _cmd_build(args, parser) -> int:
    from .backends.opus import jit
    return jit.main((["--check"] if args.check else []) + (["--verbose"] if args.verbose else []))


# --- entry ---------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqa-logits-mxfp4",
                                description="MXFP4 paged MQA indexer logits (DeepSeek-V4 / V4.1).")
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
    ex.add_argument("--model", choices=sorted(MODELS), help="SPEC section 9 geometry preset; "
                    "explicit options override it")
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
    ex.set_defaults(subparser=ex)

    isa = sub.add_parser("isa", help="AOT-compile every Triton instance for its native targets "
                         "(no GPU needed): MMA instructions, registers, spills")
    isa.add_argument("--json", metavar="FILE", help="write the records as JSON")
    isa.add_argument("--target", action="append", choices=sorted(ISA_TARGETS),
                     help=f"only this target (repeatable; default {', '.join(ISA_DEFAULT_TARGETS)})")
    isa.add_argument("--mode", action="append", choices=sorted(_MODE_CODE),
                     help="only this mode (repeatable; default all)")
    isa.add_argument("--jobs", type=int, help="compile processes (default: CPU count)")
    isa.set_defaults(subparser=isa)

    build = sub.add_parser("build", help="build the opus extension into its cache ahead of first use "
                           "(CUDA or ROCm torch with nvcc / hipcc)")
    build.add_argument("--check", action="store_true", help="only report whether it is built; never build")
    build.add_argument("--verbose", action="store_true", help="show the compiler's commands")
    build.set_defaults(subparser=build)
    from .tuning.commands import add_commands
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
