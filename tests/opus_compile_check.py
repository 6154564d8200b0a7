"""Compile the opus kernel translation unit on a machine without a GPU and read its ISA facts.

    python tests/opus_compile_check.py [sm90] [gfx942] [gfx950] [bindings] [--json FILE]

- sm90: nvcc (CUDA_HOME or PATH) for sm_90 with `-Xptxas -v`, shard by shard as the op's build
  compiles kernels.cu: registers, spills, stack frame of every kernel and the shard it came
  from; SASS through cuobjdump (the triton wheel ships one) for the MMA it runs.
- gfx942, gfx950: Debian's clang-22 with the HIP 7 headers and ocml/ockl bitcode of the triton
  wheel plus generated oclc_* control bitcode (docs/opus-backend.md), device code to ISA with
  -DOPUS_GFX=942 / 950 (the body jit.py builds for that device): VGPRs, AGPRs, SGPRs, spills,
  scratch, LDS and the count of every MFMA mnemonic in every kernel.
- bindings: g++ syntax check of bindings.cpp against the installed torch headers, and the
  torch-free launch.cpp.

tests/test_opus_build.py runs these and asserts on the records; the table this prints is the
one docs/opus-backend.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from gfx_isa import lane_ops_in_mfma_loop, mfma_real_scales

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "mqa_logits_mxfp4" / "backends" / "opus" / "csrc"
KERNELS = CSRC / "kernels.cu"
CLANG_NAMES = ("clang++-22", "clang++")
NVCC_FLAGS = ["-std=c++17", "-O3", "--fmad=false", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v"]
HIP_FLAGS = ["-x", "hip", "-std=c++17", "-O3", "-ffp-contract=off", "--cuda-device-only", "-S"]


def _triton_dir() -> Path | None:
    try:
        import triton
    except ImportError:
        return None
    return Path(triton.__file__).parent


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def find_cuobjdump() -> str | None:
    tdir = _triton_dir()
    cand = tdir / "backends" / "nvidia" / "bin" / "cuobjdump" if tdir else None
    if cand and cand.exists():
        return str(cand)
    return shutil.which("cuobjdump")


def find_clang() -> str | None:
    """A clang that knows gfx950 (clang >= 20; Debian's clang-22)."""
    for name in CLANG_NAMES:
        exe = shutil.which(name)
        if not exe:
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"clang version (\d+)", out)
        if m and int(m.group(1)) >= 20:
            return exe
    return None


def _c_compiler_for(clang: str) -> str:
    c = clang.replace("clang++", "clang")
    return c if shutil.which(c) else clang


def rocm_tree(clang: str, where: Path) -> Path:
    """A private ROCm folder: include/ from the triton wheel, bitcode/ = ocml.bc, ockl.bc and
    generated oclc_* control libraries (each is one constant)."""
    tdir = _triton_dir()
    if tdir is None:
        raise RuntimeError("triton is not installed: no HIP headers or device bitcode")
    amd = tdir / "backends" / "amd"
    root = where / "rocm"
    bc = root / "bitcode"
    bc.mkdir(parents=True, exist_ok=True)
    if not (root / "include").exists():
        (root / "include").symlink_to(amd / "include")
    for lib in ("ocml.bc", "ockl.bc"):
        shutil.copy2(amd / "lib" / lib, bc / lib)
    cc = _c_compiler_for(clang)
    consts = []
    for name, sym in (("correctly_rounded_sqrt", "__oclc_correctly_rounded_sqrt32"), ("daz_opt", "__oclc_daz_opt"),
                      ("finite_only", "__oclc_finite_only_opt"), ("unsafe_math", "__oclc_unsafe_math_opt"),
                      ("wavefrontsize64", "__oclc_wavefrontsize64")):
        consts += [(f"oclc_{name}_on", sym, "unsigned char", 1), (f"oclc_{name}_off", sym, "unsigned char", 0)]
    consts.append(("oclc_abi_version_600", "__oclc_ABI_version", "int", 600))
    consts += [(f"oclc_isa_version_{a}", "__oclc_ISA_version", "int", v) for a, v in (("90a", 9010), ("942", 9402), ("950", 9500))]
    src = where / "gen"
    src.mkdir(exist_ok=True)
    for stem, sym, ctype, value in consts:
        c = src / f"{stem}.c"
        c.write_text(f'__attribute__((weak,visibility("protected"))) const __attribute__((address_space(4))) '
                     f"{ctype} {sym} = {value};\n")
        subprocess.run([cc, "--target=amdgcn-amd-amdhsa", "-nogpulib", "-c", "-emit-llvm", "-O2", str(c),
                        "-o", str(bc / f"{stem}.bc")], check=True, capture_output=True)
    (src / "opencl.c").write_text("\n")
    subprocess.run([cc, "--target=amdgcn-amd-amdhsa", "-nogpulib", "-c", "-emit-llvm", str(src / "opencl.c"),
                    "-o", str(bc / "opencl.bc")], check=True, capture_output=True)
    return root


_SM90_ARGS = re.compile(r"mqa_logits_sm90ILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")
# rows, heads, consumer warpgroups, split (the w20 body: a converter warpgroup beside each consumer),
# union (the i8u body: the union of a sequence's row tables), canon (the i8c body: the canonical head sum),
# whole (a Prefill launch's form of its shape: the fast stage one unrolled span), every mode (the
# i8w body: that form under a name of its own, its kernel in every mode)
_SM90_I8_ARGS = re.compile(r"mqa_logits_sm90_i8ILi(\d+)ELi(\d+)ELi(\d+)ELb([01])ELb([01])ELb([01])ELb([01])ELb([01])E")
_GFX_ARGS = re.compile(r"mqa_logits_gfx9\d\dILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")  # family, rows, heads, waves, ctas
GFX_FAMILY = {"gfx942": {0: "f16", 1: "fp8", 2: "fp8fold"}, "gfx950": {0: "mxf4", 1: "mxsc"}}  # the FAMILY template argument
# The MFMA each gfx body is written for (tests/test_opus_build.py asserts its count).
GFX_MFMA = {"gfx942": "v_mfma_f32_16x16x16_f16", "gfx950": "v_mfma_scale_f32_32x32x64_f8f6f4"}
FAMILY_CODE = {0: "f16", 1: "fp8", 2: "fold"}


def cuda_shards() -> int:
    """The shards the op's CUDA build compiles kernels.cu as (jit.py's CUDA_SHARDS)."""
    sys.path.insert(0, str(ROOT))
    from mqa_logits_mxfp4.backends.opus.jit import CUDA_SHARDS
    return CUDA_SHARDS


def compile_sm90(work: Path) -> dict:
    """kernels.cu for sm_90 as the op's build compiles it, shard by shard (-DOPUS_SHARD, one after
    another): every kernel's ptxas facts and SASS, and the shards each kernel name came from."""
    nvcc = find_nvcc()
    if nvcc is None:
        return {"skipped": "nvcc not found (CUDA_HOME / PATH)"}
    shards = cuda_shards()
    start = time.perf_counter()
    rec = {"nvcc": subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1],
           "returncode": 0, "stderr": "", "shards": shards}
    kernels, objs, seen = {}, [], {}
    for shard in range(shards):
        obj = work / f"kernels_sm90_{shard}.o"
        p = subprocess.run([nvcc, *NVCC_FLAGS, f"-DOPUS_SHARDS={shards}", f"-DOPUS_SHARD={shard}", "-c",
                            str(KERNELS), "-o", str(obj)], capture_output=True, text=True)
        rec["returncode"] = p.returncode
        if p.returncode or "error" in p.stderr.lower():
            rec["stderr"] = p.stderr[-6000:]
        if p.returncode:
            break
        objs.append(obj)
        _sm90_ptxas(p.stderr, shard, kernels, rec, seen)
    rec["seconds"] = round(time.perf_counter() - start, 1)
    # a kernel compiled by more than one shard (the union pre-pass, internal to each, is left out)
    rec["in_several_shards"] = sorted(name for name, where in seen.items() if len(where) > 1)
    if rec["returncode"]:
        return rec
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        rec["sass"] = "cuobjdump not found"
    else:
        sass = "".join(subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True).stdout
                       for obj in objs)
        for block in sass.split("Function : ")[1:]:
            name = block.split()[0]
            if name in kernels:
                ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", block, re.M)
                kernels[name]["mma"] = sorted({o for o in ops if "MMA" in o})
                kernels[name]["hmma"] = sum(o.startswith("HMMA") for o in ops)
                kernels[name]["igmma"] = sum(o.startswith("IGMMA") for o in ops)
                kernels[name]["gmma"] = sorted(set(re.findall(r"\b([A-Z]GMMA\.[0-9x]+\.[A-Z0-9.]+)", block)))
                # conversions other than the narrow outs' stores (F2FP.{BF16,F16}.F32.PACK_AB): the
                # fp8 family's operand conversions (sm_90 lowers FP8 mma.sync through FP16)
                kernels[name]["f2fp"] = sum(o.startswith("F2FP") and not o.endswith(".F32.PACK_AB") for o in ops)
                kernels[name]["idp"] = sum(o.startswith("IDP") for o in ops)  # dp4a: the i8 set-up's column sums
                kernels[name]["local"] = sum(o.startswith(("LDL", "STL")) for o in ops)
                kernels[name]["loop_local"] = _local_in_loops(block, ("HMMA", "IGMMA"))
                kernels[name]["producer_loop_local"] = _local_in_loops(block, ("LDGSTS",))
    rec["kernels"] = kernels
    return rec


def _sm90_ptxas(stderr: str, shard: int, kernels: dict, rec: dict, seen: dict) -> None:
    """The kernels ptxas -v reported for one shard, into `kernels` (`seen`: name -> its shards)."""
    for m in re.finditer(r"Compiling entry function '(\S+)' for 'sm_90a'\n(?:ptxas info\s+: Function properties for \S+\n)?"
                         r"\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads\n"
                         r"ptxas info\s+: Used (\d+) registers", stderr):
        a, i8 = _SM90_ARGS.search(m.group(1)), _SM90_I8_ARGS.search(m.group(1))
        if "mqa_union_prepass" in m.group(1):  # the union bodies' pre-pass: not an instance of its own
            rec["prepass"] = dict(registers=int(m.group(5)), stack=int(m.group(2)), spill_stores=int(m.group(3)))
            continue
        seen.setdefault(m.group(1), []).append(shard)
        if a:
            fam, rows, heads, warps, ctas = (int(x) for x in a.groups())
            family, whole = FAMILY_CODE[fam], 0
        else:  # the wgmma body: one producer warpgroup and CONS consumer warpgroups (+ CONS converters), one CTA an SM
            rows, heads, cons, split, union, canon, whole, every = (int(x) for x in i8.groups())
            family = ("i8uc" if canon else "i8u") if union else "i8c" if canon else "i8w" if every else "i8"
            warps, ctas = 4 * (1 + cons * (1 + split)), 1
        kernels[m.group(1)] = dict(family=family, rows=rows, heads=heads, warps=warps, ctas=ctas, shard=shard,
                                   whole=bool(whole),
                                   registers=int(m.group(5)), stack=int(m.group(2)), spill_stores=int(m.group(3)),
                                   spill_loads=int(m.group(4)))


def _local_in_loops(block: str, marks: tuple[str, ...]) -> int:
    """LDL/STL instructions inside the loops that hold the instructions starting with one of
    `marks` (the MMAs: the tile loop; LDGSTS: the producer's stage loop), each mark's smallest such
    loop, where a spill costs every tile rather than once a piece. (A kernel may hold several
    copies of a loop: the i8 consumers, one for a float32 and one for a narrow out.)

    A loop is a natural loop of the control flow: a backward branch's target and every
    instruction that reaches the branch without passing that target. Not an address range: ptxas
    may lay another role's code between a loop's first and last instruction (the producer's
    per-piece code inside the range of a consumer loop), or a loop's cold path after its branch."""
    # (address, predicated, instruction); @PT is always true: not a predicate
    ins = [(int(a, 16), pred.strip() not in ("", "@PT"), op) for a, pred, op in re.findall(
        r"^\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*[^;]*);", block, re.M)]
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    preds: list[list[int]] = [[] for _ in ins]
    back = []  # (branch, target) with target <= branch
    for i, (_, predicated, op) in enumerate(ins):
        m = re.match(r"BRA(?:\.\S+)? (?:\S+ )?(0x[0-9a-f]+)", op)
        j = at.get(int(m.group(1), 16)) if m else None
        if j is not None:
            preds[j].append(i)
            if j <= i:
                back.append((i, j))
        ends = m is not None or op.startswith(("EXIT", "RET", "BRX", "JMX"))
        if (predicated or not ends) and i + 1 < len(ins):
            preds[i + 1].append(i)
    loops = []
    for i, j in back:
        body, todo = {j}, [i]
        while todo:
            x = todo.pop()
            if x not in body:
                body.add(x)
                todo.extend(preds[x])
        loops.append(frozenset(body))
    inner = set()
    for i, (_, _, op) in enumerate(ins):
        if op.startswith(marks):
            around = [lp for lp in loops if i in lp]
            if around:
                inner.add(min(around, key=len))
    held = frozenset().union(*inner)
    return sum(ins[i][2].startswith(("LDL", "STL")) for i in held)


def compile_gfx(arch: str, work: Path) -> dict:
    """clang-22 device code of kernels.cu for `arch` (gfx942 / gfx950) to ISA, and its facts."""
    clang = find_clang()
    if clang is None:
        return {"skipped": f"no clang >= 20 with {arch} (apt-get install clang-22 lld-22 clang-tools-22)"}
    try:
        rocm = rocm_tree(clang, work / arch)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        return {"skipped": f"no HIP headers / device bitcode: {e}"}
    isa = work / f"kernels_{arch}.s"
    start = time.perf_counter()
    p = subprocess.run([clang, *HIP_FLAGS, f"-DOPUS_GFX={arch[3:]}", f"--rocm-path={rocm}", "-isystem",
                        str(rocm / "include"), f"--rocm-device-lib-path={rocm / 'bitcode'}", f"--offload-arch={arch}",
                        str(KERNELS), "-o", str(isa)], capture_output=True, text=True)
    rec = {"seconds": round(time.perf_counter() - start, 1), "returncode": p.returncode, "stderr": p.stderr[-6000:],
           "clang": subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]}
    if p.returncode:
        return rec
    text = isa.read_text()
    rec["target"] = (re.search(r'\.amdgcn_target "([^"]+)"', text) or re.search(r"amdhsa\.target:\s+(\S+)", text)).group(1)
    kernels = {}
    for block in re.split(r"\n  - \.", text.split("amdhsa.kernels:")[1])[0:]:
        m = re.search(r"\.name:\s+(_Z\S+)", block)
        if not m or f"mqa_logits_{arch}" not in m.group(1):
            continue
        name = m.group(1)

        def field(key, blk=block):
            f = re.search(rf"\.{key}:\s+(\d+)", blk)
            return int(f.group(1)) if f else None
        fam, rows, heads, waves, ctas = (int(x) for x in _GFX_ARGS.search(name).groups())
        kernels[name] = dict(family=GFX_FAMILY[arch][fam], rows=rows, heads=heads, waves=waves, ctas=ctas,
                             vgpr=field("vgpr_count"),
                             agpr=field("agpr_count"), sgpr=field("sgpr_count"), vgpr_spill=field("vgpr_spill_count"),
                             sgpr_spill=field("sgpr_spill_count"), scratch=field("private_segment_fixed_size"),
                             lds=field("group_segment_fixed_size"))
    for name, agpr in re.findall(r"\.set (_Z\w+)\.num_agpr, (\d+)", text):
        if name in kernels:
            kernels[name]["agpr"] = int(agpr)
    for name, body in re.findall(r"\n(_Z\w+):\s*(?:;[^\n]*)?\n(.*?)\n\s*s_endpgm", text, re.S):
        if name in kernels:
            ops = re.findall(r"^\s+(v_mfma\w*)", body, re.M)
            kernels[name]["mfma_ops"] = {op: ops.count(op) for op in sorted(set(ops))}
            kernels[name]["mfma"] = ops.count(GFX_MFMA[arch])
            kernels[name]["calls"] = len(re.findall(r"s_swappc|s_setpc", body))
            kernels[name]["real_scales"] = mfma_real_scales(body)
            kernels[name]["tile_loop_lane_ops"] = lane_ops_in_mfma_loop(body)
    rec["kernels"] = kernels
    return rec


def compile_bindings(work: Path) -> dict:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return {"skipped": "no host C++ compiler"}
    from torch.utils import cpp_extension
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    start = time.perf_counter()
    syntax = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-Wall", *includes, "-DTORCH_EXTENSION_NAME=opus_check",
                             str(CSRC / "bindings.cpp")], capture_output=True, text=True)
    launch = subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-c", str(CSRC / "launch.cpp"),
                             "-o", str(work / "launch.o")], capture_output=True, text=True)
    return {"seconds": round(time.perf_counter() - start, 1),
            "bindings": {"returncode": syntax.returncode, "stderr": syntax.stderr[-6000:]},
            "launch": {"returncode": launch.returncode, "stderr": launch.stderr[-6000:]}}


def table(sm90: dict, gfx: dict) -> str:
    """Markdown tables of the records (`gfx`: {arch: record}), as docs/opus-backend.md quotes them."""
    lines = []
    if "kernels" in sm90:
        lines += ["| sm_90 kernel (family r H w ctas) | registers | spills / stack | MMA (static count) |", "|---|---|---|---|"]
        for k in sorted(sm90["kernels"].values(), key=lambda k: (k["family"], k["rows"], k["warps"], k["heads"], k["whole"])):
            mma = ", ".join(k.get("mma", [])) + f" x{k.get('hmma', 0)}" + (f", F2FP x{k['f2fp']}" if k.get("f2fp") else "")
            form = " (Prefill form)" if k["whole"] else ""
            lines.append(f"| {k['family']} r{k['rows']} H{k['heads']} w{k['warps']} c{k['ctas']}{form} | {k['registers']} | "
                         f"{k['spill_stores']} B / {k['stack']} B | {mma} |")
    for arch, rec in gfx.items():
        if "kernels" not in rec:
            continue
        lines += ["", f"| {arch} kernel (r H waves) | VGPR / AGPR / SGPR | VGPR spill / SGPR spill / scratch | LDS (B) | "
                      f"{GFX_MFMA[arch]} |", "|---|---|---|---|---|"]
        for k in sorted(rec["kernels"].values(), key=lambda k: (k["rows"], k["heads"])):
            lines.append(f"| r{k['rows']} H{k['heads']} w{k['waves']} | {k['vgpr']} / {k['agpr']} / {k['sgpr']} | "
                         f"{k['vgpr_spill']} / {k['sgpr_spill']} / {k['scratch']} | {k['lds']} | {k.get('mfma')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="*", default=["sm90", "gfx942", "gfx950", "bindings"],
                   choices=["sm90", *GFX_MFMA, "bindings"])
    p.add_argument("--json", help="write the records here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="opus-compile-") as tmp:
        work = Path(tmp)
        recs = {}
        if "sm90" in args.what:
            recs["sm90"] = compile_sm90(work)
        for arch in GFX_MFMA:
            if arch in args.what:
                recs[arch] = compile_gfx(arch, work)
        if "bindings" in args.what:
            recs["bindings"] = compile_bindings(work)
    print(table(recs.get("sm90", {}), {a: recs[a] for a in GFX_MFMA if a in recs}))
    for what, rec in recs.items():
        print(f"{what}: " + ", ".join(f"{k}={v}" for k, v in rec.items() if k in ("seconds", "returncode", "skipped", "nvcc", "clang", "target")))
    if args.json:
        Path(args.json).write_text(json.dumps(recs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
