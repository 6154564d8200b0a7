"""The opus instances: a Python mirror of csrc/registry.h (the C++ registry is the source).

Before the extension is built the backend lists these; once it is loaded it lists the C++
registry's own entries (they are equal: tests/test_opus_build.py compiles registry.h into a
host program and compares). Names: <arch>_<family>_r<rows>w<warps> (csrc/registry.h).
"""

from __future__ import annotations

from ..base import MODES, Instance

BACKEND = "opus"
PAGE_SIZES = (8, 16, 32, 64, 128)
HEAD_DIMS = (128,)
# Arches where this project has executed the family against the reference: the sm_90 families
# passed the whole conformance suite on an H200 (2026-11-30; fold also its folded-tile test); mxf4 (gfx950) and the gfx942 f16
# body have never run, so their instances self-check on first use. A family name may serve
# several arches (f16: sm_90 and gfx942), so an instance counts as validated only on its own arch
# (validated_on()).
VALIDATED_ON: dict[str, tuple[str, ...]] = {"f16": ("sm_90",), "fp8": ("sm_90",), "fold": ("sm_90",), "mxf4": (),
                                            "i8": ()}

# (id, name, arch, family, rows, warps, keys a tile, stages, CTAs an SM, heads): registry.h's rows.
REGISTRY = (
    (0, "sm90_f16_r1w4", "sm_90", "f16", 1, 4, 64, 2, 4, (16, 32, 64, 128)),
    (1, "sm90_f16_r2w4", "sm_90", "f16", 2, 4, 64, 2, 4, (16, 32, 64, 128)),
    (2, "sm90_f16_r4w4", "sm_90", "f16", 4, 4, 64, 2, 4, (16, 32, 64)),
    (3, "sm90_f16_r8w4", "sm_90", "f16", 8, 4, 64, 2, 4, (16, 32)),
    (4, "sm90_f16_r1w2", "sm_90", "f16", 1, 2, 64, 2, 4, (16, 32, 64)),
    (5, "sm90_fp8_r1w4", "sm_90", "fp8", 1, 4, 64, 2, 4, (16, 32, 64, 128)),
    (6, "gfx950_mxf4_r1w2", "gfx950", "mxf4", 1, 2, 64, 2, 2, (16, 32, 64, 128)),
    (7, "gfx950_mxf4_r2w2", "gfx950", "mxf4", 2, 2, 64, 2, 2, (16, 32, 64, 128)),
    (8, "gfx950_mxf4_r4w2", "gfx950", "mxf4", 4, 2, 64, 2, 2, (16, 32, 64)),
    (9, "gfx950_mxf4_r8w2", "gfx950", "mxf4", 8, 2, 64, 2, 2, (16, 32)),
    (10, "gfx942_f16_r1w4", "gfx942", "f16", 1, 4, 64, 2, 2, (16, 32, 64, 128)),
    (11, "gfx942_f16_r2w4", "gfx942", "f16", 2, 4, 64, 2, 2, (16, 32, 64)),
    (12, "gfx942_f16_r4w4", "gfx942", "f16", 4, 4, 64, 2, 2, (16, 32)),
    (13, "sm90_fold_r1w4", "sm_90", "fold", 1, 4, 64, 2, 4, (16, 32, 64)),
    (14, "sm90_fold_r2w4", "sm_90", "fold", 2, 4, 64, 2, 3, (16, 32, 64)),
    (15, "sm90_fold_r4w4", "sm_90", "fold", 4, 4, 64, 2, 3, (16, 32)),
    (16, "sm90_i8_r1w12", "sm_90", "i8", 1, 12, 64, 4, 1, (16, 32, 64, 128)),
    (17, "sm90_i8_r2w12", "sm_90", "i8", 2, 12, 64, 4, 1, (16, 32, 64, 128)),
    (18, "sm90_i8_r4w12", "sm_90", "i8", 4, 12, 64, 4, 1, (16, 32, 64)),
    (19, "sm90_i8_r8w12", "sm_90", "i8", 8, 12, 64, 4, 1, (16, 32)),
)


def ctas_for_heads(ctas: int, heads: int) -> int:
    """CTAs an SM a kernel is compiled for (registry.h's ctas_for_heads): 128 heads cap at 3."""
    return 3 if heads >= 128 and ctas > 3 else ctas


def validated_on(arch: str, family: str) -> tuple[str, ...]:
    """Arches where the (arch, family) body ran against the reference: VALIDATED_ON[family] holds
    arch tokens, and only this instance's own arch can be among them."""
    return (arch,) if arch in VALIDATED_ON.get(family, ()) else ()


def make_instance(id_: int, name: str, arch: str, family: str, rows: int, warps: int, block_n: int,
                  stages: int, ctas: int, heads: tuple[int, ...]) -> Instance:
    return Instance(name=name, backend=BACKEND, family=family, rows=rows, block_n=block_n, warps=warps,
                    stages=stages, heads=tuple(heads), page_sizes=PAGE_SIZES, arches=(arch,),
                    validated_on=validated_on(arch, family), modes=MODES, head_dims=HEAD_DIMS,
                    ctas_per_sm=ctas, extra=(("id", id_),))


def from_registry(rows: list[dict]) -> tuple[Instance, ...]:
    """Instances from the built module's registry() dicts."""
    return tuple(make_instance(r["id"], r["name"], r["arch"], r["family"], r["rows"], r["warps"],
                               r["block_n"], r["stages"], r["ctas_per_sm"], tuple(r["heads"]))
                 for r in rows)


def registry_id(inst: Instance) -> int:
    return dict(inst.extra)["id"]


INSTANCES = tuple(make_instance(*row) for row in REGISTRY)
