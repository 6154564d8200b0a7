"""Build the opus extension on first use and keep it in a content-addressed cache.

`load()` returns the extension module: from this process's memory, else from the cache
(`<XDG_CACHE_HOME or ~/.cache>/mqa_logits_mxfp4/opus/<key>/`), else built there through
torch.utils.cpp_extension (ninja + pybind11). The key hashes every source file, the flags, the
compiler's version, the target, and the torch and Python versions. A build happens in a private
folder under a file lock, after a second look for a module another process finished meanwhile,
and lands by an atomic rename.

Building can be forbidden (CI, a serving fleet that must not compile): set
`MQA_LOGITS_MXFP4_OPUS_BUILD=0` in the environment or `jit.BUILD_ALLOWED = False` (`mqa-logits-mxfp4 build`, or this module's own prebuild entry
point is the way to fill the cache). Then only an already cached module loads, and the backend's
`available()` says why it cannot run. Under CUDA-graph capture nothing is built: an unbuilt
module raises CaptureError ("warm up before capture").

Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from ...core import env
from ...core.errors import CaptureError

CSRC = Path(__file__).with_name("csrc")
SOURCES = ("bindings.cpp", "launch.cpp", "kernels.cu")   # compiled; the headers are hashed too
# A CUDA build compiles kernels.cu as this many shards side by side (its header says how): ninja
# runs them on every core, where one translation unit kept nvcc on one core for minutes. The SASS
# of every kernel is the same either way (docs/opus-backend.md, "Build and cache").
CUDA_SHARDS = 16
CUDA_TARGET = "sm_90"
HIP_TARGETS = ("gfx942", "gfx950")   # csrc/ has a body for each; a HIP build targets the visible one
# Module attribute, documented in docs/opus-backend.md: False forbids building (loading a cached
# module is still allowed).
BUILD_ALLOWED = True

_loaded = None
_lock = threading.Lock()


class BuildError(RuntimeError):
    """The extension could not be built (the message carries the compiler's output)."""


class BuildForbidden(RuntimeError):
    """Building is forbidden here and no cached module exists."""


def platform() -> str | None:
    """'cuda' or 'hip' for the torch build in this process, None for a CPU-only torch."""
    if getattr(torch.version, "hip", None):
        return "hip"
    if torch.version.cuda:
        return "cuda"
    return None


def hip_arch() -> str | None:
    """gfx arch of GPU 0 without its target features ('gfx942:sramecc+:xnack-' -> 'gfx942'), or
    None without a visible GPU."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]


def target(plat: str | None = None) -> str | None:
    """The arch the build's kernels are for: sm_90 on CUDA; on ROCm GPU 0's arch when csrc/ has a
    body for it, else None (nothing to build)."""
    plat = plat or platform()
    if plat == "cuda":
        return CUDA_TARGET
    if plat == "hip":
        arch = hip_arch()
        return arch if arch in HIP_TARGETS else None
    return None


def build_allowed() -> bool:
    """BUILD_ALLOWED and MQA_LOGITS_MXFP4_OPUS_BUILD (unset or 1: allowed; 0: forbidden)."""
    return BUILD_ALLOWED and env.settings().opus_build


def flags(plat: str) -> dict[str, list[str]]:
    """Compiler flags beyond torch.utils.cpp_extension's own (which add -std and the arch list
    of the visible GPUs; the target is always added here). HIP: -DOPUS_GFX picks the body
    (kernels.cu); without a target (no GPU, or an arch with no body) there is nothing to pick."""
    if plat == "hip":
        tgt = target(plat)
        cuda = ["-O3", "-ffp-contract=off"] + ([f"--offload-arch={tgt}", f"-DOPUS_GFX={tgt[3:]}"] if tgt else [])
    else:
        # ptxas compiles each shard's kernels on several threads (the same SASS)
        cuda = ["-O3", "--fmad=false", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "--split-compile=0",
                f"-DOPUS_SHARDS={CUDA_SHARDS}"]
    return {"extra_cflags": ["-O3"], "extra_cuda_cflags": cuda}


def shard_sources(plat: str, src: Path) -> list[Path]:
    """kernels.cu's shards 1 .. CUDA_SHARDS - 1 as one-line files beside it in the build's
    snapshot `src` (kernels.cu itself is shard 0); none for HIP, which builds one unit."""
    if plat == "hip":
        return []
    out = []
    for k in range(1, CUDA_SHARDS):
        path = src / f"kernels_shard{k}.cu"
        path.write_text(f'#define OPUS_SHARD {k}\n#include "kernels.cu"\n')
        out.append(path)
    return out


@functools.cache
def compiler(plat: str) -> tuple[str | None, str]:
    """(path of the device compiler or None, its version text)."""
    from torch.utils import cpp_extension
    if plat == "hip":
        home = cpp_extension.ROCM_HOME
        exe = os.path.join(home, "bin", "hipcc") if home else shutil.which("hipcc")
    else:
        home = cpp_extension.CUDA_HOME
        exe = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not exe or not os.path.exists(exe):
        return None, ""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        return exe, out.stdout + out.stderr
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{exe}: {e}"


def source_files() -> list[Path]:
    return sorted(p for p in CSRC.iterdir() if p.suffix in (".h", ".cuh", ".cu", ".cpp"))


@functools.cache
def cache_key(plat: str) -> str:
    h = hashlib.sha256()
    for p in source_files():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(repr(sorted(flags(plat).items())).encode())
    h.update(compiler(plat)[1].encode())
    h.update(f"{target(plat)}|{torch.__version__}|{sys.version_info[:2]}|{plat}".encode())
    return h.hexdigest()[:20]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mqa_logits_mxfp4" / "opus"


def module_name(key: str) -> str:
    return f"mqa_logits_mxfp4_opus_{key}"


def cached_module_path(plat: str | None = None) -> Path | None:
    """The cached extension for this process's torch build, or None when there is none."""
    plat = plat or platform()
    if plat is None:
        return None
    key = cache_key(plat)
    found = sorted((cache_root() / key).glob(module_name(key) + "*.so"))
    return found[0] if found else None


def is_loaded() -> bool:
    return _loaded is not None


def loaded():
    """The extension module if this process has loaded it, else None (never builds)."""
    return _loaded


def load_cached():
    """The extension module if this process has loaded it or the cache holds a build for this
    torch (imported then), else None; never builds (the Triton backend's hot path asks it)."""
    if _loaded is not None:
        return _loaded
    plat = platform()
    if plat is None or target(plat) is None or cached_module_path(plat) is None:
        return None
    return load()


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


@contextlib.contextmanager
def _file_lock(path: Path):
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _build(plat: str, key: str, final: Path, verbose: bool):
    from torch.utils import cpp_extension
    root = final.parent
    work = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=root))
    try:
        src = work / "csrc"
        shutil.copytree(CSRC, src)  # a snapshot of what was hashed; hipify writes beside it
        name = module_name(key)
        try:
            sources = [src / s for s in SOURCES] + shard_sources(plat, src)
            module = cpp_extension.load(name=name, sources=[str(s) for s in sources],
                                        build_directory=str(work), verbose=verbose, with_cuda=True,
                                        **flags(plat))
        except Exception as e:  # the compiler's output is in the exception text
            raise BuildError(f"building the opus extension for {target(plat)} failed: {e}") from e
        stage = work / "module"
        stage.mkdir()
        for so in work.glob(name + "*.so"):
            shutil.copy2(so, stage / so.name)
        if final.exists():  # a leftover without a module (we hold the lock and looked)
            shutil.rmtree(final)
        os.replace(stage, final)
        return module
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load(verbose: bool = False):
    """The extension module, building it when allowed (see the module docstring)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    plat = platform()
    if plat is None:
        raise BuildError(f"the opus kernels need a CUDA or ROCm build of torch; got torch {torch.__version__}")
    if target(plat) is None:
        raise BuildError(f"the opus HIP kernels build for {', '.join(HIP_TARGETS)}; the visible GPU is {hip_arch()}")
    capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    with _lock:
        if _loaded is not None:
            return _loaded
        key = cache_key(plat)
        final = cache_root() / key
        name = module_name(key)
        path = cached_module_path(plat)
        if path is None:
            if capturing:
                raise CaptureError("the opus extension is not built yet and cannot be built during "
                                   "CUDA-graph capture: warm up before capture (build a config and "
                                   "call the op once, or run `mqa-logits-mxfp4 build`)")
            if not build_allowed():
                raise BuildForbidden(f"building the opus extension is forbidden here "
                                     f"(MQA_LOGITS_MXFP4_OPUS_BUILD=0 or jit.BUILD_ALLOWED False) and {final} holds no built module for {target(plat)}")
            with _file_lock(cache_root() / f"{key}.lock"):
                path = cached_module_path(plat)  # a second look: another process may have built it
                if path is None:
                    _loaded = _build(plat, key, final, verbose)
                    return _loaded
        _loaded = _import(path, name)
        return _loaded


# Exit codes of main() (and of `mqa-logits-mxfp4 build`), as its --help and docs/opus-backend.md state.
EXIT_BUILT, EXIT_NOT_BUILT, EXIT_CANNOT_BUILD = 0, 1, 2
EXIT_RULE = ("exit 0: the extension is built (and loads); 1: --check found none yet, or the build failed; "
             "2: nothing can be built on this machine (CPU-only torch, no GPU arch with a kernel body, no "
             "compiler or ninja, or building forbidden) and none is cached")


def build_blocker(plat: str | None) -> str | None:
    """Why no build can run in this process (None when one can): what `build` reports with exit 2."""
    if plat is None:
        return f"torch {torch.__version__} is CPU-only (the opus kernels need a CUDA or ROCm build of torch)"
    if target(plat) is None:
        return f"the opus HIP kernels build for {', '.join(HIP_TARGETS)}; the visible GPU is {hip_arch()}"
    if not build_allowed():
        return "building is forbidden (MQA_LOGITS_MXFP4_OPUS_BUILD=0 or jit.BUILD_ALLOWED False)"
    from torch.utils import cpp_extension
    if not cpp_extension.is_ninja_available():
        return "ninja is not installed (pip install -e .[opus])"
    if compiler(plat)[0] is None:
        return f"no {'hipcc (ROCM_HOME)' if plat == 'hip' else 'nvcc (CUDA_HOME)'} was found"
    return None


def main(argv: list[str] | None = None) -> int:
    """Prebuild: `python -m mqa_logits_mxfp4.backends.opus.jit [--check] [--verbose]`."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m mqa_logits_mxfp4.backends.opus.jit",
                                description="build the opus extension into its cache (or --check it)",
                                epilog=EXIT_RULE)
    p.add_argument("--check", action="store_true", help="only report the cache state; never build")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    plat = platform()
    if plat is None or target(plat) is None:
        print(f"opus: nothing can be built on this machine: {build_blocker(plat)}", file=sys.stderr)
        return EXIT_CANNOT_BUILD
    exe, version = compiler(plat)
    print(f"opus: target {target(plat)}, compiler {exe or 'not found'}, cache {cache_root() / cache_key(plat)}")
    path = cached_module_path(plat)
    blocker = None if path else build_blocker(plat)
    if blocker:
        print(f"opus: not built, and nothing can be built on this machine: {blocker}", file=sys.stderr)
        return EXIT_CANNOT_BUILD
    if args.check:
        print(f"opus: {'built: ' + str(path) if path else 'not built (`mqa-logits-mxfp4 build` builds it)'}")
        return EXIT_BUILT if path else EXIT_NOT_BUILT
    try:
        module = load(verbose=args.verbose)
    except (BuildError, BuildForbidden) as e:
        print(f"opus: {e}", file=sys.stderr)
        return EXIT_NOT_BUILT
    print(f"opus: loaded {module.__name__} ({module.target()}), {len(module.registry())} registry entries")
    return EXIT_BUILT


if __name__ == "__main__":
    sys.exit(main())
