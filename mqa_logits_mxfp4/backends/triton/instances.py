"""The Triton instances. Names: <family>_r<rows>n<keys>w<warps>s<stages>.

Families: `fp8` (E2M1 -> E4M3 exactly, one K=32 MMA per scale block, scales on CUDA cores),
`bf16` (the same with BF16 operands, for arches without FP8 MMA) and `scaled` (`tl.dot_scaled`,
the whole head_dim in one MXFP4 MMA where it is native).
"""

from __future__ import annotations

from ..base import Instance

HEADS = (16, 32, 64, 128)
PAGE_SIZES = (8, 16, 32, 64, 128)
FAMILY_ARCHES = {
    "fp8": ("cpu", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "gfx950"),
    "bf16": ("cpu", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120",
             "gfx90a", "gfx942", "gfx950", "gfx1250"),
    "scaled": ("cpu", "gfx950", "gfx1250", "sm_100", "sm_103"),
}
# Where this project ran the family against the reference (CPU: the interpreter in CI).
FAMILY_VALIDATED = {
    "fp8": ("cpu",),
    "bf16": ("cpu",),
    "scaled": ("cpu",),
}
# (rows, block_n, warps, stages): decode tiles first, then prefill-sized ones.
SHAPES = ((1, 64, 4, 2), (2, 64, 4, 2), (4, 64, 8, 2), (8, 32, 4, 2))


def _make(family: str, rows: int, block_n: int, warps: int, stages: int) -> Instance:
    return Instance(name=f"{family}_r{rows}n{block_n}w{warps}s{stages}", backend="triton",
                    family=family, rows=rows, block_n=block_n, warps=warps, stages=stages,
                    heads=HEADS, page_sizes=PAGE_SIZES, arches=FAMILY_ARCHES[family],
                    validated_on=FAMILY_VALIDATED[family], head_dims=(128, 256))


INSTANCES = tuple(_make(f, *shape) for f in FAMILY_ARCHES for shape in SHAPES)
