"""The Triton instances. Names: <family>_r<rows>n<keys>w<warps>s<stages>.

Families: `fp8` (E2M1 -> E4M3 exactly, one K=32 MMA per scale block, scales on CUDA cores),
`f16` (the same with FP16 operands, for arches without FP8 MMA) and `scaled` (`tl.dot_scaled`,
the whole head_dim in one MXFP4 MMA where it is native).
"""

from __future__ import annotations

from ...core.geometry import HEADS, PAGE_SIZES
from ...core.instance import Instance

# The kernel's MMA constexpr for each family (kernels.py's MMA_* and isa.py's MMA kinds).
MMA_KINDS = {"fp8": 0, "f16": 1, "scaled": 2}
FAMILY_ARCHES = {
    "fp8": ("cpu", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "gfx950"),
    "f16": ("cpu", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120",
             "gfx90a", "gfx942", "gfx950", "gfx1250"),
    # sm_100 is left out: at these tiles Triton lowered dot_scaled there to a BF16 emulation
    "scaled": ("cpu", "gfx950", "gfx1250"),
}
# Where this project ran the family against the reference (CPU: the interpreter in CI;
# sm_90: the conformance suite on an H200).
FAMILY_VALIDATED = {
    "fp8": ("cpu", "sm_90"),
    "f16": ("cpu", "sm_90"),
    "scaled": ("cpu",),
}
FAMILY_HEAD_DIMS = {"fp8": (128,), "f16": (128,), "scaled": (128, 256)}
# dot_scaled sums the scaled blocks inside the MMA in the hardware's order, not the canonical one
# (docs/numerics.md), so `scaled` is the one family that is not bitwise identical to the others.
NON_CANONICAL = ("scaled",)
# (rows, block_n, warps, stages). 64-key tiles: sm_90's wgmma needs M = 64 keys a warpgroup
# (32-key tiles fell back to mma.sync in AOT compiles). The backend admits an instance only
# while its fp32 accumulator, rows*heads x block_n, is at most ACC_PER_THREAD registers a
# thread: 64 spilled on sm_90 (docs/triton-backend.md), so a tile holds at most 128 columns.
SHAPES = ((1, 64, 4, 2), (1, 64, 8, 2), (2, 64, 8, 2), (4, 64, 8, 2), (8, 64, 8, 2))
ACC_PER_THREAD = 32


def _make(family: str, rows: int, block_n: int, warps: int, stages: int) -> Instance:
    return Instance(name=f"{family}_r{rows}n{block_n}w{warps}s{stages}", backend="triton",
                    family=family, rows=rows, block_n=block_n, warps=warps, stages=stages,
                    heads=HEADS, page_sizes=PAGE_SIZES, arches=FAMILY_ARCHES[family],
                    validated_on=FAMILY_VALIDATED[family], head_dims=FAMILY_HEAD_DIMS[family],
                    canonical=family not in NON_CANONICAL)


INSTANCES = tuple(_make(f, *shape) for f in FAMILY_ARCHES for shape in SHAPES)
