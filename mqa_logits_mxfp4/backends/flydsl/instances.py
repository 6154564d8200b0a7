"""The FlyDSL instances. Names: fly_h<heads>_r<rows>w<waves>.

One family, `scaled`: per scale block one `v_mfma_scale_f32_16x16x128_f8f6f4` (E2M1 x E2M1, unit
E8M0 scales) with the other blocks' key lanes zeroed, scales applied on the VALU
(docs/flydsl-backend.md). A CTA of `warps` waves scores `rows` rows of one sequence against
16 * warps keys; the group's queries are staged in LDS (heads x rows x 84 bytes).
"""

from __future__ import annotations

from ...core.geometry import PAGE_SIZES  # the kernels serve any multiple of 4; these are the contract's
from ...core.instance import Instance

WAVES = 4
# (heads, rows): rows * heads <= 256, the Triton tile bound; all compile without spills.
SHAPES = ((32, 1), (32, 2), (32, 4), (32, 8), (64, 1), (64, 2), (64, 4), (128, 1), (128, 2))
ARCHES = ("gfx950",)


def _make(heads: int, rows: int) -> Instance:
    return Instance(name=f"fly_h{heads}_r{rows}w{WAVES}", backend="flydsl", family="scaled",
                    rows=rows, block_n=16 * WAVES, warps=WAVES, stages=1, heads=(heads,),
                    page_sizes=PAGE_SIZES, arches=ARCHES, validated_on=(), head_dims=(128,))


INSTANCES = tuple(_make(h, r) for h, r in SHAPES)
