"""The FlyDSL instances. Names: fly_h<heads>_r<rows>w<waves> (family scaled) and
fly_mxsc_h<heads>_r<rows>w<waves>.

Two families (docs/flydsl-backend.md): `scaled`, per scale block one
`v_mfma_scale_f32_16x16x128_f8f6f4` (E2M1 x E2M1, unit E8M0 scales) with the other blocks' key
lanes zeroed, scales applied on the VALU: the canonical order; `mxsc`, one such MFMA over the
whole head_dim with the real E8M0 block scales as its scale operands where every scale byte of
the wave's keys and of the 16-head tile lies in the rule's range (docs/numerics.md, "Scaled
MFMA tiles"), `scaled`'s steps elsewhere: not canonical. A CTA of `warps` waves scores `rows`
rows of one sequence against 16 * warps keys; the group's queries are staged in LDS (heads x
rows x 84 bytes; mxsc 88, and a word a 16-head tile).
"""

from __future__ import annotations

from ...core.geometry import PAGE_SIZES  # the kernels serve any multiple of 4; these are the contract's
from ...core.instance import Instance

WAVES = 4
# (heads, rows): rows * heads <= 256, the Triton tile bound; all compile without spills.
SHAPES = ((32, 1), (32, 2), (32, 4), (32, 8), (64, 1), (64, 2), (64, 4), (128, 1), (128, 2))
ARCHES = ("gfx950",)


FAMILIES = ("mxsc", "scaled")  # the default rule's order: the full-rate family first


def _make(family: str, heads: int, rows: int) -> Instance:
    prefix = "fly_" if family == "scaled" else f"fly_{family}_"
    return Instance(name=f"{prefix}h{heads}_r{rows}w{WAVES}", backend="flydsl", family=family,
                    rows=rows, block_n=16 * WAVES, warps=WAVES, stages=1, heads=(heads,),
                    page_sizes=PAGE_SIZES, arches=ARCHES, validated_on=(), head_dims=(128,),
                    canonical=family == "scaled")


INSTANCES = tuple(_make(f, h, r) for f in FAMILIES for h, r in SHAPES)
