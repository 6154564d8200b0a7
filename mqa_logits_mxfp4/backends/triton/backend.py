"""Host side of the Triton backend: support rules, the per-arch pick, launches."""

from __future__ import annotations

import torch
import triton

from ...core.instance import Instance, Reason, ok_if
from ...core.modes import MODE_CODES
from ...worksplit.rules import seq_lanes
from ..base import BackendBase, attribute_rules, rank_by_rows
from .instances import ACC_PER_THREAD, INSTANCES, MMA_KINDS

_PREFERRED_FAMILY = {"gfx950": "scaled", "gfx1250": "scaled",
                     "gfx942": "f16", "gfx90a": "f16", "sm_80": "f16", "sm_86": "f16"}


def _kernels():
    from . import kernels  # imported on first launch: TRITON_INTERPRET is read when it is
    return kernels


def interpreting() -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(_kernels().mqa_logits_kernel, InterpretedFunction)


def _triton_version() -> tuple[int, int]:
    return tuple(int(x) for x in triton.__version__.split(".")[:2])


# Launches after the first of a config go straight to the compiled kernel (`CompiledKernel[grid]`),
# skipping JITFunction.run's argument binding and cache lookup: most of the Triton launch's host
# time (docs/perf-notes.md). The key holds every fact Triton specializes a kernel on (pointer
# 16-byte alignment; specialized ints equal to 1, divisible by 16, 32-bit or not; the sizes,
# which are not specialized, 32-bit or not; the config fixes `parts`), so a cached kernel only
# serves arguments that Triton's own lookup would map to it.
_DIRECT_LAUNCH = hasattr(triton.compiler.CompiledKernel, "__getitem__")


class TritonBackend(BackendBase):
    name = "triton"

    def __init__(self):
        self._compiled: dict[tuple, tuple] = {}

    def available(self) -> Reason | None:
        return None  # triton is a hard dependency; per-device rules live in supports()

    def instances(self) -> tuple[Instance, ...]:
        return INSTANCES

    def supports(self, key) -> list[Reason]:
        if key.arch == "cpu":
            return ok_if([(interpreting(), "device",
                           "the Triton backend runs on the CPU only through its interpreter: set "
                           "TRITON_INTERPRET=1 before importing mqa_logits_mxfp4; got a CPU device without it")])
        return ok_if([(not interpreting(), "device",
                       f"TRITON_INTERPRET=1 is set, so kernels cannot run on {key.device}")])

    def instance_supports(self, inst: Instance, key) -> list[Reason]:
        rules = attribute_rules(inst, key) + [
            (inst.rows * key.heads * inst.block_n <= ACC_PER_THREAD * 32 * inst.warps, "registers",
             f"holds rows x heads x keys = {inst.rows * key.heads * inst.block_n} accumulators; "
             f"at most {ACC_PER_THREAD * 32 * inst.warps} fit its {inst.warps} warps"),
        ]
        if inst.family == "scaled" and key.arch == "cpu":
            rules.append((_triton_version() >= (3, 9), "interpreter",
                          f"needs triton 3.9 (tl.dot_scaled in the interpreter); got {triton.__version__}"))
        return ok_if(rules, inst.name)

    def ranked_picks(self, key) -> list[tuple[Instance, str]]:
        """Per-arch default rule: the preferred family first, each ranked by rank_by_rows."""
        family = _PREFERRED_FAMILY.get(key.arch, "fp8")
        order = [family] + [f for f in MMA_KINDS if f != family]
        return [pick for fam in order for pick in rank_by_rows(
            [i for i in INSTANCES if i.family == fam and not self.instance_supports(i, key)], key)]

    def launch(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
               query_start_loc, row_ends, out, out_offsets, records, row_starts=None) -> None:
        flat = out_offsets is not None
        starts = row_starts is not None
        pointers = (q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                    row_starts if starts else row_ends,
                    out, out_offsets if flat else row_ends, records if records is not None else row_ends)
        # sizes (do_not_specialize: only their width matters; row_ends are clamped to max_seq_len,
        # which the checked table and out cover), then the specialized strides
        sizes = (query_start_loc.shape[0] - 1, row_ends.shape[0], kv_cache.shape[0], cfg.key.max_seq_len,
                 out.shape[0] if flat else 0)
        strides = (weights.stride(0), block_tables.stride(0), 0 if flat else out.stride(0))
        ints = (*sizes, *strides, cfg.prefill_grid[1])
        grid = (*cfg.prefill_grid, 1) if mode == "prefill" else (cfg.table_grid, 1, 1)
        key = (id(cfg), mode, flat, starts, out.dtype, *[p.data_ptr() % 16 == 0 for p in pointers],
               *[(v == 1, v % 16 == 0, -2**31 <= v < 2**31) for v in strides], max(sizes) < 2**31)
        hit = self._compiled.get(key)
        if hit is not None and hit[0] is cfg:
            _, compiled, constexprs = hit
            compiled[grid](*pointers, *ints, *constexprs)
            return
        inst = self._instance(cfg.instance)
        interp = interpreting()
        constexprs = (cfg.heads, cfg.heads.bit_length() - 1, cfg.head_dim, cfg.page_size, cfg.pages_per_block,
                      cfg.gather, inst.rows, inst.block_n, MMA_KINDS[inst.family], MODE_CODES[mode],
                      seq_lanes(cfg.max_seqs) if mode == "free" else 1,  # SEQ_P2: Free only
                      flat, starts, out.dtype != torch.float32, interp)
        compiled = _kernels().mqa_logits_kernel[grid](
            *pointers, *ints, *constexprs,
            num_warps=inst.warps, num_stages=inst.stages, enable_fp_fusion=False)
        if _DIRECT_LAUNCH and not interp:
            if len(self._compiled) >= 1024:
                self._compiled.clear()
            self._compiled[key] = (cfg, compiled, constexprs)  # holds cfg, so its id() stays unique


BACKEND = TritonBackend()
