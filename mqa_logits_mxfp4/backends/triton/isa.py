"""AOT ISA check of the Triton kernels (`mqa-logits-mxfp4 isa`): compile every instance at
production tile shapes for its native targets without a GPU, and report the MMA instructions
found, registers, spills and shared memory. Needs TRITON_INTERPRET unset (decorated kernels
cannot be AOT-compiled under the interpreter).

Importing this module does not import triton (the CLI builds its parser from it before it
knows whether TRITON_INTERPRET is to be set); the functions import it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time

import torch

from ...core.modes import MODE_CODES
from ...core.problem import ProblemKey
from .instances import INSTANCES, MMA_KINDS

# name -> (GPUTarget arguments, shared-memory budget in bytes). Each target compiles every
# instance whose `arches` name it.
ISA_TARGETS = {
    "sm_90": (("cuda", 90, 32), 232448),
    "gfx950": (("hip", "gfx950", 64), 163840),
    "sm_100": (("cuda", 100, 32), 232448),
}
ISA_DEFAULT_TARGETS = ("sm_90", "gfx950")  # sm_100 on request
# (target, MMA kind) -> the MMA instruction a compile must contain, as a pattern a whole mnemonic
# of the record's `mma` list matches; every other MMA mnemonic found is listed in `mma_unexpected`
# (tests/test_isa.py requires none on the default targets: a silent fallback, e.g. to mma.sync
# on Hopper, fails). Kinds are the kernel's MMA constexpr (instances.MMA_KINDS maps family names
# to them): 0 fp8 operands, 1 16-bit float operands, 2 dot_scaled.
EXPECTED_MMA = {
    ("sm_90", 0): r"QGMMA(\.\w+)+",
    ("sm_90", 1): r"HGMMA(\.\w+)+",
    ("gfx950", 0): r"v_mfma_f32_\d+x\d+x\d+_fp8_fp8",
    ("gfx950", 1): r"v_mfma_f32_\d+x\d+x\d+_b?f16",
    ("gfx950", 2): r"v_mfma_scale_f32_\d+x\d+x\d+_f8f6f4",
    ("sm_100", 0): r"UTCQMMA(\.\w+)*",
    ("sm_100", 1): r"UTCHMMA(\.\w+)*",
    ("sm_100", 2): r"UTCOMMA(\.\w+)*",  # native MXFP4 tcgen05 (kind::mxf4), not an emulation
}
# (instance, target) -> why its spill is accepted for now, with what `isa` measured and the
# triton version. Every other (instance, target) is production: a spill there fails the command.
# Empty: no instance spilled at sm_90 / gfx950 under triton 3.9.0 (CI's).
EXPECTED_SPILLS: dict[tuple[str, str], str] = {}
# (mode, SEQ_P2): SEQ_P2 (next_power_of_2(max_seqs)) shapes Free mode's work split and moves
# register use a lot, so Free compiles for a small and a large decode batch; Prefill ignores it.
ISA_VARIANTS = (("free", 4), ("free", 64), ("prefill", 64))
MODE_CODE = {m: MODE_CODES[m] for m in ("free", "prefill")}  # the modes `isa` compiles
_ISA_HEADS = 64

# mqa_logits_kernel's runtime arguments as backend.launch() passes them for a non-flat output:
# rs_ptr, oo_ptr and sched_ptr receive row_ends (int32) there (no row_starts: HAS_STARTS off);
# Python ints below 2^31 specialize to i32.
_SIGNATURE = {"q_ptr": "*u8", "qs_ptr": "*u8", "kv_ptr": "*u8", "ks_ptr": "*u8", "w_ptr": "*fp32",
              "bt_ptr": "*i32", "qsl_ptr": "*i32", "re_ptr": "*i32", "rs_ptr": "*i32", "out_ptr": "*fp32",
              "oo_ptr": "*i32", "sched_ptr": "*i32", "num_seqs": "i32", "num_rows": "i32",
              "num_pages": "i32", "seq_cap": "i32", "out_numel": "i32", "stride_w": "i32",
              "stride_bt": "i32", "stride_out": "i32", "parts": "i32"}
# The JIT marks 16-aligned pointers and ints divisible by 16 (which changes register use). The
# strides are in the usual case: heads (64), the table width and max_seq_len multiples of 16.
_DIVISIBLE = [name for name, ty in _SIGNATURE.items() if ty.startswith("*")] + [
    "stride_w", "stride_bt", "stride_out"]


def isa_jobs(targets=None, modes=None) -> list[dict]:
    """Every (instance, target, mode, SEQ_P2) the isa command compiles, at heads 64 where the
    instance serves 64 heads, else at the most heads it serves."""
    from .backend import BACKEND  # imports triton: the CLI imports this module before TRITON_INTERPRET is settled

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
                    jobs.append(dict(instance=inst.name, heads=heads, family=inst.family, mma_kind=MMA_KINDS[inst.family],
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

    from . import kernels  # decorated now: TRITON_INTERPRET must be unset (run() is refused otherwise)

    rec = dict(job)
    kernel = kernels.mqa_logits_kernel
    if not hasattr(kernel, "cache_key"):
        rec["error"] = "mqa_logits_kernel was decorated under TRITON_INTERPRET=1; cannot AOT-compile"
        return rec
    # the constexprs backend.launch() passes, at a production tile
    consts = dict(HEADS=job["heads"], LOG2_H=job["heads"].bit_length() - 1, D=128, PAGE=64, PPB=1,
                  GATHER=False, R=job["rows"], BLOCK_N=job["block_n"], MMA=job["mma_kind"],
                  MODE=MODE_CODE[job["mode"]], SEQ_P2=job["seq_p2"], FLAT_OUT=False,
                  HAS_STARTS=False, NARROW_OUT=False, INTERP=False)
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
    rec["mma_ok"] = pattern is None or any(re.fullmatch(pattern, m) for m in rec["mma"])
    rec["mma_unexpected"] = [] if pattern is None else [m for m in rec["mma"] if not re.fullmatch(pattern, m)]
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


def run(targets=None, modes=None, jobs: int | None = None, json_path: str | None = None) -> int:
    """Compile, judge and print; 1 when any compile failed, lacked its MMA or spilled unexpectedly."""
    import triton
    jobs_ = isa_jobs(targets, modes)
    t0 = time.perf_counter()
    workers = max(1, min(jobs or os.cpu_count() or 1, len(jobs_)))
    print(f"isa: {len(jobs_)} compiles of mqa_logits_kernel (heads 64, or the most an instance serves; D128 page 64), triton "
          f"{triton.__version__}, {workers} process(es)", flush=True)
    if workers == 1:
        records = [compile_isa(job) for job in jobs_]
    else:
        import concurrent.futures
        import multiprocessing
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked compiler state
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            records = list(pool.map(compile_isa, jobs_))
    for rec in records:
        rec["production"] = (rec["instance"], rec["target"]) not in EXPECTED_SPILLS
        rec["problems"] = _judge(rec)
    wall = time.perf_counter() - t0
    print(_isa_table(records))
    for (name, target), why in EXPECTED_SPILLS.items():
        seen = [r for r in records if (r["instance"], r["target"]) == (name, target) and "error" not in r]
        if seen and not any(r["spills_any"] for r in seen):
            print(f"note: {name} on {target} is in EXPECTED_SPILLS ({why}) but no longer spills")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(triton=triton.__version__, wall_s=round(wall, 1), records=records), f, indent=1)
    failed = [r for r in records if r["problems"]]
    verdict = "FAIL" if failed else "PASS"
    print(f"isa: {verdict} ({len(records) - len(failed)}/{len(records)} ok, {wall:.1f} s)")
    return 1 if failed else 0
