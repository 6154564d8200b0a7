"""Host side of the Triton backend: support rules, the per-arch pick, launches."""

from __future__ import annotations

import functools
import re

import torch
import triton
from triton import knobs

from ...core.instance import Instance, Reason, ok_if
from ...core.modes import MODE_CODES
from ...worksplit.rules import seq_lanes
from ..base import BackendBase, attribute_rules, rank_by_rows
from ..opus import jit as opus_jit
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


def _pointer_sources(flat: bool, starts: bool, table: bool) -> tuple[int, ...]:
    """The kernel's 12 pointer arguments, each as the index of the op's tensor argument that fills
    it (q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out,
    out_offsets, records, row_starts: 0..11); an absent optional one is filled by row_ends (7)."""
    return (0, 1, 2, 3, 4, 5, 6, 7, 11 if starts else 7, 8, 9 if flat else 7, 10 if table else 7)


def _ptx_param_bits(ptx: str, name: str) -> list[int] | None:
    """The widths in bits of the PTX entry `name`'s parameters (`.param .u64 ...`: 64), or None
    when the entry is not found or a parameter is not a plain integer one."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\((.*?)\)", ptx, re.S)
    if m is None:
        return None
    kinds = re.findall(r"\.param\s+\.([a-z]+)(\d+)\b", m.group(1))
    if len(kinds) != len(re.findall(r"\.param\s", m.group(1))) or any(k not in ("u", "s", "b") for k, _ in kinds):
        return None
    return [int(bits) for _, bits in kinds]


def kernel_params(compiled) -> list[int] | None:
    """The widths of a compiled kernel's PTX parameters, or None where the kernel needs what only
    Triton's launcher does (scratch memory, clusters, a cooperative or PDL launch)."""
    md = compiled.metadata
    if (getattr(md, "num_ctas", 1) != 1 or getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0)
            or getattr(md, "launch_cooperative_grid", False) or getattr(md, "launch_pdl", False)):
        return None
    return _ptx_param_bits(compiled.asm.get("ptx", ""), md.name)


def launch_plan(compiled, sources: tuple[int, ...], ints: tuple[int, ...],
                bits: list[int] | None) -> list[tuple[int, int]] | None:
    """The C++ hot path's parameter plan for a compiled kernel (csrc/bindings.cpp FunctionLauncher)
    whose PTX parameters have these widths (kernel_params): one (kind, value) a kernel parameter --
    (0, tensor index) for a pointer, (1 | 2, value) for an int32 / int64, (3, 0) for the null
    scratch pointers Triton appends -- or None when the parameters do not match the plan's count
    and widths (a Triton whose ABI differs gets no hot path)."""
    if bits is None:
        return None
    values = (*[(0, i) for i in sources], *ints)  # the kernel's arguments in order, constexprs after them
    plan = []
    for i, kind in enumerate(compiled.src.signature.values()):
        if kind == "constexpr":
            continue  # a constexpr argument, or an int Triton specialized into one (== 1)
        if i >= len(values):
            return None
        if kind.startswith("*"):
            plan.append(values[i])
        elif kind in ("i32", "i64"):
            plan.append((1 if kind == "i32" else 2, values[i]))
        else:
            return None
    if not 0 <= len(bits) - len(plan) <= 2:
        return None
    plan += [(3, 0)] * (len(bits) - len(plan))  # global (and profile) scratch: null
    if any(b != (32 if kind == 1 else 64) for (kind, _), b in zip(plan, bits)):
        return None
    return plan


def _no_launch_hooks() -> bool:
    """No Triton launch hook is set: the knobs hold an empty HookChain (Triton 3.5 on) or None."""
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    return (enter is None or not getattr(enter, "calls", True)) and (leave is None or not getattr(leave, "calls", True))


class _HotPath:
    """The op's hot path for one Triton config and mode (BackendBase.launcher): run() goes to the
    C++ FunctionLauncher unless a Triton launch hook is set (a profiler's: Triton's launcher calls
    it, so such calls take the Python path); accept() hands the FunctionLauncher the kernel that
    the backend's last launch of this signature compiled."""

    def __init__(self, cpp, backend: "TritonBackend", cfg, mode: str):
        self._run = cpp.run
        self.signatures = cpp.signatures
        self._cpp, self._backend, self._cfg, self._mode = cpp, backend, cfg, mode

    def run(self, *tensors) -> bool:
        return _no_launch_hooks() and self._run(*tensors)

    def accept(self, *tensors) -> None:
        found = self._backend.served_by(self._cfg, self._mode, *tensors)
        if found is not None:
            self._cpp.accept(*tensors, *found)


class TritonBackend(BackendBase):
    name = "triton"

    def __init__(self):
        self._compiled: dict[tuple, tuple] = {}
        self._looked_for_opus = False

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

    def _args(self, cfg, mode, tensors) -> tuple:
        """A launch's arguments from the op's 12 tensor arguments (q, q_scale, kv_cache, kv_scale,
        weights, block_tables, query_start_loc, row_ends, out, out_offsets, records, row_starts):
        (pointer sources, pointers, ints, grid, key) -- the key holds every fact Triton specializes
        the kernel on (see _DIRECT_LAUNCH)."""
        _, _, kv_cache, _, weights, block_tables, query_start_loc, row_ends, out, out_offsets, records, row_starts = tensors
        flat = out_offsets is not None
        starts = row_starts is not None
        sources = _pointer_sources(flat, starts, records is not None)
        pointers = tuple(tensors[i] for i in sources)
        # sizes (do_not_specialize: only their width matters; row_ends are clamped to max_seq_len,
        # which the checked table and out cover), then the specialized strides
        sizes = (query_start_loc.shape[0] - 1, row_ends.shape[0], kv_cache.shape[0], cfg.key.max_seq_len,
                 out.shape[0] if flat else 0)
        strides = (weights.stride(0), block_tables.stride(0), 0 if flat else out.stride(0))
        ints = (*sizes, *strides, cfg.prefill_grid[1])
        grid = (*cfg.prefill_grid, 1) if mode == "prefill" else (cfg.table_grid, 1, 1)
        key = (id(cfg), mode, flat, starts, out.dtype, *[p.data_ptr() % 16 == 0 for p in pointers],
               *[(v == 1, v % 16 == 0, -2**31 <= v < 2**31) for v in strides], max(sizes) < 2**31)
        return sources, pointers, ints, grid, key

    def launch(self, cfg, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
               query_start_loc, row_ends, out, out_offsets, records, row_starts=None) -> None:
        _, pointers, ints, grid, key = self._args(cfg, mode, (
            q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out, out_offsets,
            records, row_starts))
        hit = self._compiled.get(key)
        if hit is not None and hit[0] is cfg:
            compiled, constexprs = hit[1], hit[2]
            compiled[grid](*pointers, *ints, *constexprs)
            return
        inst = self._instance(cfg.instance)
        interp = interpreting()
        flat, starts = out_offsets is not None, row_starts is not None
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
            self._compiled[key] = (cfg, compiled, constexprs)  # holds cfg, so its id() stays unique (served_by
            # appends the kernel's PTX parameter widths)

    # The op's hot path (docs/contract.md, "Host cost"): the opus extension's C++ FunctionLauncher
    # around the kernels this backend compiled, where that extension is loaded or built (a
    # Triton-only process loads the built one; nothing here builds it) and the torch is a CUDA one.
    @property
    def offers_launcher(self) -> bool:
        return _hot_path_platform()

    def launcher(self, cfg, mode):
        if not _hot_path_platform():
            return None
        module = opus_jit.loaded()
        if module is None and not self._looked_for_opus:
            self._looked_for_opus = True  # one look at the disk a process (it globs the cache)
            module = opus_jit.load_cached()
        return None if module is None else _HotPath(module.FunctionLauncher(), self, cfg, mode)

    def served_by(self, cfg, mode, *tensors):
        """(function handle, grid, threads, shared memory, plan) of the kernel this backend's last
        launch of these arguments used, for the hot path; None when it has none or Triton's own
        launcher must launch it (launch_plan)."""
        sources, _, ints, grid, key = self._args(cfg, mode, tensors)
        hit = self._compiled.get(key)
        if hit is None or hit[0] is not cfg:
            return None
        compiled = hit[1]
        if len(hit) == 3:  # the PTX read once a compiled kernel
            hit = self._compiled[key] = (*hit, kernel_params(compiled))
        plan = launch_plan(compiled, sources, ints, hit[3])
        if plan is None:
            return None
        compiled._init_handles()  # loaded by its first launch already; a no-op then
        return compiled.function, grid, 32 * compiled.metadata.num_warps, compiled.metadata.shared, plan


@functools.cache
def _hot_path_platform() -> bool:
    """A CUDA torch and compiled (not interpreted) kernels launched through CompiledKernel."""
    return _DIRECT_LAUNCH and torch.version.cuda is not None and not interpreting()


BACKEND = TritonBackend()
