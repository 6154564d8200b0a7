"""Host side of the FlyDSL backend: availability, support rules, the per-arch pick, launches.

Runs only with flydsl (the pinned version), a ROCm build of torch and a gfx950 device; elsewhere
available() says which of the three is missing. Kernels are compiled on first launch (flydsl
keeps its own disk cache) and are never executed by this project's CI: every instance has
`validated_on=()`, so the dispatcher self-checks it against the reference on first use.
"""

from __future__ import annotations

import importlib.util
import threading

import torch

from ...core.errors import CaptureError, InputError
from ...core.instance import Instance, Reason, ok_if
from ...core.outputs import OUT_NAMES
from ...worksplit.rules import seq_lanes
from ..base import BackendBase, rank_by_rows
from .instances import FAMILIES, INSTANCES
from .spec import KernelSpec
from .toolchain import PINNED_VERSION, compile_kernel, installed_version

ARCH = "gfx950"
ALIGN = {"q": 16, "kv_cache": 16, "kv_scale": 16}   # the kernels' 16-byte loads

_compiled: dict[tuple[KernelSpec, str], object] = {}
_compile_lock = threading.Lock()


def _device_archs() -> list[str]:
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_properties(i).gcnArchName.split(":")[0]
            for i in range(torch.cuda.device_count())]


class FlydslBackend(BackendBase):
    name = "flydsl"

    def available(self) -> Reason | None:
        if importlib.util.find_spec("flydsl") is None:
            return Reason("install", "flydsl is not installed (pip install -e .[flydsl] installs "
                                     f"flydsl=={PINNED_VERSION})")
        version = installed_version()
        if version != PINNED_VERSION:
            return Reason("install", f"the flydsl kernels are verified with flydsl=={PINNED_VERSION}; "
                                     f"got flydsl {version}")
        if not getattr(torch.version, "hip", None):
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
            return Reason("torch", f"flydsl kernels need a ROCm build of torch; got torch "
                                   f"{torch.__version__} ({build})")
        archs = _device_archs()
        if ARCH not in archs:
            return Reason("device", f"flydsl kernels need a {ARCH} device; visible devices: "
                                    f"{', '.join(archs) or 'none'}")
        return None

    def instances(self) -> tuple[Instance, ...]:
        return INSTANCES

    def supports(self, key) -> list[Reason]:
        return ok_if([
            (key.arch == ARCH, "arch", f"flydsl kernels are built for {ARCH} only; got {key.arch}"),
            (key.head_dim == 128, "head_dim", f"flydsl kernels need head_dim 128; got {key.head_dim}"),
        ])

    def ranked_picks(self, key) -> list[tuple[Instance, str]]:
        """Per-arch default rule: the families in order (instances.FAMILIES: mxsc, the scaled MFMA
        over the whole head_dim, first), each ranked by the rule every backend shares
        (base.rank_by_rows)."""
        fits = [i for i in INSTANCES if not self.instance_supports(i, key)]
        return [pick for fam in FAMILIES for pick in rank_by_rows([i for i in fits if i.family == fam], key)]

    def kernel_spec(self, cfg, mode: str, weights: torch.Tensor, out: torch.Tensor,
                    out_offsets: torch.Tensor | None, row_starts: torch.Tensor | None = None) -> KernelSpec:
        """The kernel a launch needs: the config's instance and layout, the mode, and what the
        tensors select (weights' and out's dtypes, a flat out, row_starts given or not)."""
        inst = self._instance(cfg.instance)
        return KernelSpec(heads=cfg.heads, rows=inst.rows, waves=inst.warps, page_size=cfg.page_size,
                          pages_per_block=cfg.pages_per_block, gather=cfg.gather, mode=mode,
                          flat_out=out_offsets is not None, w_bf16=weights.dtype == torch.bfloat16,
                          family=inst.family, has_starts=row_starts is not None,
                          out_dtype=OUT_NAMES[out.dtype])

    def launch_args(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                    query_start_loc, row_ends, out, out_offsets, records, row_starts=None) -> list:
        """The compiled launcher's arguments (raw addresses for its pointers), in order."""
        for name, t in (("q", q), ("kv_cache", kv_cache), ("kv_scale", kv_scale)):
            if t.data_ptr() % ALIGN[name]:
                raise InputError(f"the flydsl kernels read {name} in {ALIGN[name]}-byte vectors, so its "
                                 f"data must be {ALIGN[name]}-byte aligned; got address {t.data_ptr():#x}")
        flat = out_offsets is not None
        grid = cfg.prefill_grid if mode == "prefill" else (cfg.table_grid, 1)
        unused = row_ends.data_ptr()   # pointer arguments a mode does not read
        return [q.data_ptr(), q_scale.data_ptr(), kv_cache.data_ptr(), kv_scale.data_ptr(),
                weights.data_ptr(), block_tables.data_ptr(), query_start_loc.data_ptr(),
                row_ends.data_ptr(), out.data_ptr(), out_offsets.data_ptr() if flat else unused,
                records.data_ptr() if records is not None else unused,
                row_starts.data_ptr() if row_starts is not None else unused,
                query_start_loc.shape[0] - 1, seq_lanes(cfg.max_seqs), row_ends.shape[0],
                cfg.max_seq_len, kv_cache.shape[0], out.shape[0] if flat else 0,
                weights.stride(0), block_tables.stride(0), 0 if flat else out.stride(0),
                grid[0], grid[1]]

    def launch(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
               query_start_loc, row_ends, out, out_offsets, records, row_starts=None) -> None:
        spec = self.kernel_spec(cfg, mode, weights, out, out_offsets, row_starts)
        args = self.launch_args(cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                                query_start_loc, row_ends, out, out_offsets, records, row_starts)
        fn = compiled(spec, cfg.device)
        with torch.cuda.device(cfg.device):
            fn(*args, torch.cuda.current_stream(cfg.device))


def compiled(spec: KernelSpec, device: torch.device):
    """The compiled launcher of `spec` for the device's arch, compiling it on first use."""
    arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
    slot = (spec, arch)
    fn = _compiled.get(slot)
    if fn is None:
        if torch.cuda.is_current_stream_capturing():
            raise CaptureError(f"flydsl kernel {spec.name} is not compiled yet and cannot compile during "
                               "CUDA-graph capture: warm up (call the op once with this config) before capture")
        with _compile_lock:
            fn = _compiled.get(slot)
            if fn is None:
                fn = _compiled[slot] = compile_kernel(spec, arch)
    return fn


BACKEND = FlydslBackend()
