"""Compiling the FlyDSL kernels: for the live device, or for gfx950 ISA on a machine with no GPU.

flydsl links code objects with `$ROCM_PATH/llvm/bin/ld.lld` (LLD 18 or newer). On a machine
without ROCm, `rocm_stub()` points a private ROCM_PATH at a Debian `lld-19`; without any LLD,
`no_linker()` swaps flydsl's last pass for ISA output (internal API of the pinned version, so
only the compile checks use it). Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

PINNED_VERSION = "0.5.0"   # the flydsl every kernel was compile-checked with (pyproject's pin)
ISA_KEYS = ("vgpr_count", "agpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count",
            "private_segment_fixed_size", "group_segment_fixed_size")
SCALED_MFMA = re.compile(r"\bv_mfma_scale_f32_\d+x\d+x\d+_f8f6f4\b")
GLOBAL_STORE = re.compile(r"(?:global|buffer|flat)_store_(\w+)$")
NARROW_CVT = {"bf16": re.compile(r"v_cvt_pk_bf16_f32\b"), "f16": re.compile(r"v_cvt_f16_f32(?:_e32|_e64)?$")}
# a scalar load from the kernarg segment (s[0:1]: no dispatch or queue pointer is requested)
KERNARG_LOAD = re.compile(r"^\ts_load_dword\w*\s+s\[?[\d:]+\]?,\s*s\[0:1\],\s*(0x[0-9a-f]+|\d+)", re.M)


def installed_version() -> str | None:
    from importlib import metadata
    try:
        return metadata.version("flydsl")
    except metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def target_arch(arch: str):
    """flydsl reads its target from the environment at compile time (and silently picks gfx942
    when it finds no GPU), so set both names it reads for the duration of a compile."""
    saved = {k: os.environ.get(k) for k in ("FLYDSL_GPU_ARCH", "ARCH")}
    os.environ["FLYDSL_GPU_ARCH"] = os.environ["ARCH"] = arch
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def find_lld() -> str | None:
    """An ld.lld of LLVM 18 or newer (flydsl emits code-object v6), or None."""
    for cand in [os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "llvm", "bin", "ld.lld"),
                 *(shutil.which(f"ld.lld-{v}") for v in range(22, 17, -1)),
                 *(f"/usr/lib/llvm-{v}/bin/ld.lld" for v in range(22, 17, -1))]:
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def rocm_stub(lld: str, root: str | None = None) -> str:
    """A directory laid out as flydsl expects ROCM_PATH (llvm/bin/ld.lld -> `lld`)."""
    root = root or tempfile.mkdtemp(prefix="flydsl-rocm-")
    bin_dir = Path(root, "llvm", "bin")
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "ld.lld"
    if not link.exists():
        link.symlink_to(os.path.realpath(lld))
    return root


@contextlib.contextmanager
def no_linker():
    """Make flydsl stop at ISA text (gpu-module-to-binary{format=isa}): no ld.lld needed."""
    from flydsl.compiler.backends import rocm
    original = rocm.RocmBackend._pipeline_parts

    def isa_parts(self, *, compile_hints):
        pre, _ = original(self, compile_hints=compile_hints)
        return pre, 'gpu-module-to-binary{format=isa opts="" section= toolkit=}'

    rocm.RocmBackend._pipeline_parts = isa_parts
    try:
        yield
    finally:
        rocm.RocmBackend._pipeline_parts = original


def isa_text_of(compiled) -> str:
    """The ISA of a function compiled under no_linker()."""
    from flydsl.compiler.jit_function import _extract_isa_text
    return _extract_isa_text(str(compiled._keepalive.ir))


def isa_facts(isa: str) -> dict:
    """Target, register/LDS/scratch metadata and instruction counts of one kernel's ISA."""
    facts = {k: int(v) for k, v in re.findall(r"^\s+(?:- )?\.(%s):\s+(\d+)" % "|".join(ISA_KEYS), isa, re.M)}
    target = re.search(r'\.amdgcn_target\s+"([^"]+)"', isa)
    facts["target"] = target.group(1) if target else None
    body = [ln.split()[0] for ln in isa.splitlines() if ln.startswith("\t") and not ln.startswith("\t.")
            and ln.split()]
    facts["scaled_mfma"] = sum(bool(SCALED_MFMA.match(op)) for op in body)
    facts["instructions"] = len(body)
    stores = [m.group(1) for m in map(GLOBAL_STORE.match, body) if m]
    facts["global_stores"] = {w: stores.count(w) for w in sorted(set(stores))}   # the out stores
    for dtype, cvt in NARROW_CVT.items():
        facts[f"cvt_{dtype}"] = sum(bool(cvt.match(op)) for op in body)
    # kernel argument offsets (metadata) and those the code reads: an unread argument is unused
    facts["kernarg_offsets"] = [int(v) for v in re.findall(r"^\s+(?:- )?\.offset:\s+(\d+)", isa, re.M)]
    facts["kernarg_loads"] = sorted({int(v, 0) for v in KERNARG_LOAD.findall(isa)})
    return facts


def compile_kernel(spec, arch: str = "gfx950", waves_per_eu: int | None = None):
    """flyc.compile the launcher of `spec` for `arch` (placeholder arguments, nothing runs)."""
    import flydsl.compiler as flyc

    from .kernels import INT_ARGS, build, pointer_args
    with target_arch(arch):
        comp = flyc.compile[{"waves_per_eu": waves_per_eu}] if waves_per_eu else flyc.compile
        return comp(build(spec), *pointer_args(spec), *[1] * len(INT_ARGS))
