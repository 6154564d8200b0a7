"""What a compiled FlyDSL kernel is specialized on, and the kernels the CI compile check covers.
Importable without flydsl (the backend and the tests use it on machines without it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...core.modes import MODE_CODES as MODES
from ...core.records import RECORD_INTS  # noqa: F401 (the kernels' record stride)
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

    @property
    def block_n(self) -> int:
        return 16 * self.waves

    @property
    def name(self) -> str:
        layout = f"p{self.page_size}x{self.pages_per_block}{'g' if self.gather else ''}"
        family = "" if self.family == "scaled" else f"{self.family}_"
        return (f"fly_{family}h{self.heads}_r{self.rows}w{self.waves}_{self.mode}_{layout}"
                f"_{'flat' if self.flat_out else 'rows'}_{'bf16' if self.w_bf16 else 'f32'}")

    def as_dict(self) -> dict:
        return asdict(self)


def check_matrix() -> list[KernelSpec]:
    """Every instance x mode at the DeepSeek-V4 layout (64-token pages, row-major out, bf16
    weights), plus each other layout option once a family (the options are independent of the
    mode's work split): 8-token pages x 32 per table entry (V4.1 full layers), gather with
    8-token pages (V4.1 candidate layers), 16-token pages with a flat out and fp32 weights."""
    specs = [KernelSpec(i.heads[0], i.rows, i.warps, 64, 1, False, m, False, True, i.family)
             for i in INSTANCES for m in MODES]
    for family in sorted({i.family for i in INSTANCES}):
        specs += [KernelSpec(32, 8, 4, 8, 32, False, "table", False, True, family),
                  KernelSpec(32, 1, 4, 8, 1, True, "free", False, True, family),
                  KernelSpec(64, 2, 4, 16, 1, False, "prefill", True, False, family)]
    return specs
