"""Host side of the opus backend: availability, support rules, the per-arch pick, launches.

The kernels are native C++ (csrc/) built on first use (jit.py). Instances come from the C++
registry once the extension is loaded, before that from instances.py, which reads the same
csrc/registry.h. The sm_90 instances ran the conformance suite on an H200; no AMD instance
(gfx942, gfx950) has run (`validated_on=()`), so the dispatcher self-checks each against the
reference on first use.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ...core.errors import InputError
from ...core.instance import Instance, Reason, ok_if
from ...core.modes import MODE_CODES, is_decode
from ..base import BackendBase, attribute_rules, grid_sizes, rank_by_rows
from . import jit
from .instances import (ARCHES, INSTANCES, UNION_FAMILIES, UNION_MAX_ENTRIES, ctas_for_heads, from_registry,
                        registry_id)

# Per-arch family order of the default rule (decode, prefill). sm_90 (H200, docs/opus-backend.md,
# docs/perf-notes.md): the wgmma body i8 was 1.9-3.3x faster than the best mma.sync body on decode
# with realistic scales (and 0.7-0.9x of it on wide-spread scales, where its canonical path
# runs); among the mma.sync bodies FP8 was fastest on one-row decode, fold (two-row tiles) on
# MTP 4 decode with 16+ sequences and on prefill. gfx942's fp8fold (FP8 operands carrying the
# block scales, one accumulator; not canonical) comes first, then fp8 (one FP8 MFMA a block), then
# f16 (two FP16 ones); gfx950's mxsc (two
# scaled MFMAs a tile over the whole head_dim) comes before mxf4 (four, each with half its K
# lanes zero) unless batch_invariant asks for canonical instances; neither was ever measured.
# i8u (the union of a sequence's row tables, gather mode) comes after i8's one-row instances: how
# much it saves depends on how much the rows' lists overlap, which only a tuned table knows.
# i8c (the i8 body with the canonical head sum: canonical) after them: the first canonical family
# when batch_invariant asks for one (the mma.sync bodies' 0.08-0.15 of the floor behind it), and
# i8uc (the union body with i8c's tiles) after it, as i8u after i8. i8w (i8's Prefill form in
# every mode) after i8: it wins only where a CTA runs many stages, which a tuned table knows.
_FAMILY_ORDER = {"sm_90": (("i8", "i8w", "i8u", "i8c", "i8uc", "fp8", "fold", "f16"),
                           ("i8", "i8w", "i8c", "fold", "f16", "fp8")),
                 "gfx942": (("fp8fold", "fp8", "f16"), ("fp8fold", "fp8", "f16")),
                 "gfx950": (("mxsc", "mxf4"), ("mxsc", "mxf4"))}


@functools.cache
def _registry_instances(module) -> tuple[Instance, ...]:
    """The loaded module's registry as instances, made once: every launch looks its instance up,
    and rebuilding the (then 13) instances took 61 us of host time (the H200's raw opus launch
    measured 67 us of host time before this cache; not re-measured since)."""
    return from_registry(module.registry())


class OpusBackend(BackendBase):
    name = "opus"

    def available(self) -> Reason | None:
        plat = jit.platform()
        if plat is None:
            return Reason("torch", f"the opus kernels need a CUDA (sm_90) or ROCm (gfx942, gfx950) build of torch; "
                                   f"got torch {torch.__version__} (CPU-only)")
        if not torch.cuda.is_available():
            return Reason("device", f"no GPU is visible to torch {torch.__version__}")
        if jit.target(plat) is None:
            return Reason("device", f"the opus HIP kernels build for {', '.join(jit.HIP_TARGETS)}; "
                                    f"the visible GPU is {jit.hip_arch()}")
        if jit.is_loaded() or jit.cached_module_path(plat) is not None:
            return None
        if not jit.build_allowed():
            return Reason("build", f"building the opus extension is forbidden here "
                                   f"(MQA_LOGITS_MXFP4_OPUS_BUILD=0 or jit.BUILD_ALLOWED False) and none is cached under {jit.cache_root()}")
        from torch.utils import cpp_extension
        if not cpp_extension.is_ninja_available():
            return Reason("install", "the opus extension builds with ninja, which is not installed "
                                     "(pip install -e .[opus])")
        exe, _ = jit.compiler(plat)
        if exe is None:
            tool = "hipcc (ROCM_HOME)" if plat == "hip" else "nvcc (CUDA_HOME)"
            return Reason("compiler", f"the opus extension builds on first use with {tool}; none was found")
        return None

    def instances(self) -> tuple[Instance, ...]:
        module = jit.loaded()
        return _registry_instances(module) if module is not None else INSTANCES

    def supports(self, key) -> list[Reason]:
        return ok_if([
            (key.arch in ARCHES, "arch", f"the opus kernels are written for {', '.join(ARCHES)}; got {key.arch}"),
            (key.head_dim == 128, "head_dim", f"the opus kernels need head_dim 128; got {key.head_dim}"),
        ])

    def instance_supports(self, inst: Instance, key) -> list[Reason]:
        """The shared attribute rules; the union bodies (i8u, i8uc) serve gather mode only, any
        rows, while their pre-pass's hash holds one group's entries: min(max_qlen, rows a group) x
        block_table_width (a union holds a sequence's rows where max_qlen of them fit, else runs of
        whole groups: args.h's union_geometry)."""
        if inst.family not in UNION_FAMILIES:
            return super().instance_supports(inst, key)
        rows = min(key.max_qlen, inst.rows)
        return ok_if([rule for rule in attribute_rules(inst, key) if rule[1] != "gather"] + [
            (key.gather, "gather", "scores the union of each sequence's row tables: gather mode only"),
            (rows * key.block_table_width <= UNION_MAX_ENTRIES, "union",
             f"its pre-pass holds min(max_qlen, rows a group) x block_table_width <= {UNION_MAX_ENTRIES} "
             f"entries; got {rows} x {key.block_table_width}"),
        ], inst.name)

    def ranked_picks(self, key) -> list[tuple[Instance, str]]:
        """Per-arch default rule: the arch's families in order (decode, prefill), each ranked by
        rank_by_rows."""
        fits = [i for i in self.instances() if not self.instance_supports(i, key)]
        decode, prefill = _FAMILY_ORDER.get(key.arch, ((), ()))
        order = decode if is_decode(key.max_qlen) else prefill
        return [(i, m) for fam in order for i, m in rank_by_rows([i for i in fits if i.family == fam], key)
                if m in i.modes]

    def grid_sizes(self, inst: Instance, key) -> tuple[int, tuple[int, int]]:
        return grid_sizes(dataclasses.replace(inst, ctas_per_sm=ctas_for_heads(inst.ctas_per_sm, key.heads)), key)

    def _fixed_args(self, cfg, mode) -> tuple:
        """A launch's arguments fixed by the config and mode: registry id, mode code, heads, page
        size, pages_per_block, gather, max_seq_len, grid_x, parts, max_qlen."""
        key = cfg.key
        groups, parts = cfg.prefill_grid
        return (registry_id(self._instance(cfg.instance)), MODE_CODES[mode], key.heads, key.page_size,
                key.pages_per_block, key.gather, key.max_seq_len, groups if mode == "prefill" else cfg.table_grid,
                parts, key.max_qlen)

    def launch(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
               query_start_loc, row_ends, out, out_offsets, records, row_starts=None, *,
               path_stats=None) -> None:
        """`path_stats` (tests only): an int64 [2] the i8 body adds its fast / canonical stage
        counts to (stages of instances.I8_STAGE_KEYS keys; instances.i8_stages gives their sum)."""
        module = jit.load()
        iid, code, heads, page, ppb, gather, max_seq_len, grid_x, parts, max_qlen = self._fixed_args(cfg, mode)
        stream = torch.cuda.current_stream(out.device).cuda_stream
        try:
            module.launch(iid, code, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
                          row_ends, out, out_offsets, records if mode == "table" else None, heads, page, ppb,
                          gather, max_seq_len, grid_x, parts, stream, path_stats, row_starts, max_qlen)
        except ValueError as e:  # the launcher's own checks (csrc/checks.h); nothing was launched
            raise InputError(str(e)) from None

    offers_launcher = True

    def launcher(self, cfg, mode):
        """bindings.cpp's Launcher (the signatures it accepted, the launch in C++), once the
        extension is loaded: the op's first call loads it after its checks."""
        module = jit.loaded()
        return None if module is None else module.Launcher(*self._fixed_args(cfg, mode))


BACKEND = OpusBackend()
