"""What a compiled FlyDSL kernel is specialized on, and the kernels the CI compile check covers.
Importable without flydsl (the backend and the tests use it on machines without it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ...core.modes import MODE_CODES as MODES
from ...core.outputs import OUT_CODES
from ...core.records import RECORD_INTS  # noqa: F401 (the kernels' record stride)
from ...worksplit.rules import PIECE_COST  # noqa: F401 (a group's set-up units in the split)
from .instances import INSTANCES

MODE_TABLE, MODE_FREE, MODE_PREFILL = MODES["table"], MODES["free"], MODES["prefill"]
HEAD_DIM = 128


@dataclass(frozen=True)
class KernelSpec:
    """Compile-time parameters; everything else (sizes, strides, grid) is a runtime argument."""

    heads: int
    rows: int
    waves: int
    page_size: int
    pages_per_block: int
    gather: bool
    mode: str
    flat_out: bool
    w_bf16: bool
    family: str = "scaled"  # or "mxsc" (instances.py)
    has_starts: bool = False  # row_starts given: row r stores keys [row_starts[r], row_ends[r])
    out_dtype: str = "f32"    # core/outputs.py's name of out's dtype: the f32 result, or it rounded once

    def __post_init__(self):
        assert self.out_dtype in OUT_CODES, self.out_dtype

    @property
    def block_n(self) -> int:
        return 16 * self.waves

    @property
    def name(self) -> str:
        layout = f"p{self.page_size}x{self.pages_per_block}{'g' if self.gather else ''}"
        family = "" if self.family == "scaled" else f"{self.family}_"
        out = "" if self.out_dtype == "f32" else f"_out{self.out_dtype}"
        return (f"fly_{family}h{self.heads}_r{self.rows}w{self.waves}_{self.mode}_{layout}"
                f"_{'flat' if self.flat_out else 'rows'}_{'bf16' if self.w_bf16 else 'f32'}{out}"
                f"{'_starts' if self.has_starts else ''}")

    def as_dict(self) -> dict:
        return asdict(self)


def check_matrix() -> list[KernelSpec]:
    """Every instance x mode at the DeepSeek-V4 layout (64-token pages, row-major out, bf16
    weights, f32 out, no row_starts), plus each other layout option once a family (the options
    are independent of the mode's work split): 8-token pages x 32 per table entry (V4.1 full
    layers), gather with 8-token pages (V4.1 candidate layers), 16-token pages with a flat out
    and fp32 weights. Then per family and layout option a kernel with row_starts and a bf16 out
    and one with an f16 out, and at the DeepSeek-V4 layout row_starts in every mode (f32 out)."""
    specs = [KernelSpec(i.heads[0], i.rows, i.warps, 64, 1, False, m, False, True, i.family)
             for i in INSTANCES for m in MODES]
    families = sorted({i.family for i in INSTANCES})
    layouts = {family: [KernelSpec(64, 2, 4, 64, 1, False, "free", False, True, family),
                        KernelSpec(32, 8, 4, 8, 32, False, "table", False, True, family),
                        KernelSpec(32, 1, 4, 8, 1, True, "free", False, True, family),
                        KernelSpec(64, 2, 4, 16, 1, False, "prefill", True, False, family)]
               for family in families}
    for family in families:
        specs += layouts[family][1:]
    for family in families:
        for s in layouts[family]:
            specs += [replace(s, has_starts=True, out_dtype="bf16"), replace(s, out_dtype="f16")]
        specs += [replace(layouts[family][0], mode=m, has_starts=True) for m in MODES]
    return specs
