"""The opus instances, read from csrc/registry.h (the one list; nothing here repeats it).

At import this module parses registry.h's `OPUS_INSTANCES` X-macro (one
`X(id, name, arch, family, rows, warps, keys, stages, ctas, heads_mask)` a row, the format
docs/adding-an-instance.md describes), its `OPUS_ARCH_NAME_<arch>` tokens, `OPUS_PAGE_SIZES` and
`OPUS_I8_STAGE_KEYS` (the keys of one stage of the i8 body: what one count of its path_stats is).
Before the extension is built the backend lists these; once it is loaded it lists the C++
registry's own entries, which are equal (tests/test_opus_build.py compiles registry.h into a
host program and compares). Names: <arch>_<family>_r<rows>w<warps>.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...core.instance import Instance
from ...core.modes import MODES
from ...worksplit import rules as worksplit

BACKEND = "opus"
REGISTRY_H = Path(__file__).with_name("csrc") / "registry.h"
HEAD_DIMS = (128,)
# Arches where this project has executed the family against the reference: the sm_90 families passed
# the whole conformance suite on an H200 (2026-11-30; fold also its folded-tile test; i8 2026-12-01,
# with its fast-path tests; i8u 2026-12-04: its gather cases of the suite, its union tests and
# memcheck; i8c 2026-12-04: the whole GPU suite, its fast tiles bit for bit the canonical bodies',
# memcheck; i8uc 2026-12-04: the whole GPU suite, its union tests with the canonical-bits one,
# memcheck; i8w, i8's Prefill form in every mode, 2026-12-07 on an H100: the whole GPU suite,
# memcheck); mxf4 and mxsc (gfx950) and the gfx942 f16 body never ran, so their instances self-check
# on first use. A family name may serve several arches (f16: sm_90 and gfx942), so an instance
# counts as validated only on its own arch (validated_on()).
VALIDATED_ON: dict[str, tuple[str, ...]] = {"f16": ("sm_90",), "fp8": ("sm_90",), "fold": ("sm_90",), "mxf4": (),
                                            "mxsc": (), "fp8fold": (), "i8": ("sm_90",), "i8u": ("sm_90",),
                                            "i8c": ("sm_90",), "i8uc": ("sm_90",), "i8w": ("sm_90",)}

_FIELDS = ("id", "name", "arch", "family", "rows", "warps", "keys", "stages", "ctas", "heads")


class RegistryFormatError(RuntimeError):
    """registry.h does not read as the format docs/adding-an-instance.md describes."""


def _macro_body(text: str, name: str) -> str:
    """The replacement text of a (backslash-continued) #define, comments removed."""
    m = re.search(rf"^#define {name}(?=\s)(.*?)(?<!\\)$", text, re.M | re.S)
    if m is None:
        raise RegistryFormatError(f"{REGISTRY_H}: no #define {name}")
    body = m.group(1).replace("\\\n", "\n")
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", body, flags=re.S)


def heads_of_mask(mask: int) -> tuple[int, ...]:
    """registry.h's heads mask: bit b set means 16 << b heads (bit 0 = 16 ... bit 3 = 128)."""
    return tuple(16 << bit for bit in range(4) if mask >> bit & 1)


def parse_registry(text: str) -> tuple[tuple, ...]:
    """(id, name, arch, family, rows, warps, keys a tile, stages, CTAs an SM, heads) per X row."""
    arch_names = dict(re.findall(r'^#define OPUS_ARCH_NAME_(\w+) "([^"]+)"', text, re.M))
    body = _macro_body(text, r"OPUS_INSTANCES\(X\)")
    rows = []
    for args in re.findall(r"\bX\(([^)]*)\)", body):
        fields = [f.strip() for f in args.split(",")]
        if len(fields) != len(_FIELDS):
            raise RegistryFormatError(f"{REGISTRY_H}: X({args}) has {len(fields)} fields; want {', '.join(_FIELDS)}")
        id_, name, arch, family, *nums, mask = fields
        if arch not in arch_names:
            raise RegistryFormatError(f"{REGISTRY_H}: X({args}) names arch {arch!r}, which has no "
                                      f"#define OPUS_ARCH_NAME_{arch}")
        try:
            rows_, warps, keys, stages, ctas = (int(v, 0) for v in nums)
            rows.append((int(id_, 0), name, arch_names[arch], family, rows_, warps, keys, stages, ctas,
                         heads_of_mask(int(mask, 0))))
        except ValueError as e:
            raise RegistryFormatError(f"{REGISTRY_H}: X({args}): {e}") from None
    ids = [r[0] for r in rows]
    if not rows or len(set(ids)) != len(ids):
        raise RegistryFormatError(f"{REGISTRY_H}: OPUS_INSTANCES needs rows with distinct ids; got ids {ids}")
    return tuple(rows)


def parse_page_sizes(text: str) -> tuple[int, ...]:
    return tuple(int(v, 0) for v in re.findall(r"\w+", _macro_body(text, "OPUS_PAGE_SIZES")))


def parse_i8_stage_keys(text: str) -> int:
    """Keys of one i8 consumer stage (registry.h's OPUS_I8_STAGE_KEYS: the sequence's 64-key tiles
    it holds are voted on as one, and path_stats counts such stages)."""
    body = _macro_body(text, "OPUS_I8_STAGE_KEYS").strip()
    try:
        keys = int(body, 0)
    except ValueError:
        raise RegistryFormatError(f"{REGISTRY_H}: OPUS_I8_STAGE_KEYS is {body!r}; want a number") from None
    if keys <= 0 or keys % 64:
        raise RegistryFormatError(f"{REGISTRY_H}: OPUS_I8_STAGE_KEYS = {keys}; want whole 64-key tiles")
    return keys


def i8_consumers(warps: int) -> int:
    """Consumer warpgroups of an i8 body of `warps` warps (registry.h's i8_consumers; the host
    check prints it, tests/test_opus_build.py compares)."""
    return 2 if warps == 20 else warps // 4 - 1


def i8_table_setup(rows: int, warps: int) -> int:
    """The tiles a later row group's set-up counts as in an i8 body's Table split; 0: the units' own
    split (registry.h's i8_table_setup says why; tests/test_opus_build.py compares)."""
    return 0 if warps != 12 else 8 if rows == 1 else 12


def parse_union(text: str) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """The union bodies' families, modes and most pre-pass entries (registry.h's
    OPUS_UNION_FAMILIES, OPUS_UNION_MODES, OPUS_UNION_MAX_ENTRIES: a union's rows x block-table columns)."""
    families = tuple(_macro_body(text, "OPUS_UNION_FAMILIES").strip().strip('"').split(","))
    modes = tuple(_macro_body(text, "OPUS_UNION_MODES").strip().strip('"').split(","))
    try:
        entries = int(_macro_body(text, "OPUS_UNION_MAX_ENTRIES").strip(), 0)
    except ValueError:
        raise RegistryFormatError(f"{REGISTRY_H}: OPUS_UNION_MAX_ENTRIES is not a number") from None
    if not set(modes) <= set(MODES):
        raise RegistryFormatError(f"{REGISTRY_H}: OPUS_UNION_MODES {modes} names a mode outside {MODES}")
    return families, modes, entries


def parse_arches(text: str) -> tuple[str, ...]:
    """The device arch tokens csrc/ has bodies for (OPUS_ARCH_NAME_*), in registry.h's order."""
    return tuple(re.findall(r'^#define OPUS_ARCH_NAME_\w+ "([^"]+)"', text, re.M))


_TEXT = REGISTRY_H.read_text()
REGISTRY = parse_registry(_TEXT)
PAGE_SIZES = parse_page_sizes(_TEXT)
ARCHES = parse_arches(_TEXT)
I8_STAGE_KEYS = parse_i8_stage_keys(_TEXT)
UNION_FAMILIES, UNION_MODES, UNION_MAX_ENTRIES = parse_union(_TEXT)


def i8_stages(cfg, inst: Instance, mode: str, query_start_loc, row_ends) -> int:
    """The stages an i8 launch of `cfg` in `mode` scores, which its path_stats counters add up to
    (tests, scripts/i8_smoke.py): each piece of the work split (worksplit/rules.py: the kernel's
    own rules) scores one stage for every group of I8_STAGE_KEYS / 64 sequence tiles (4j .. 4j + 3)
    that holds one of its tiles below its row group's key end (docs/numerics.md, "Integer
    tiles"). query_start_loc, row_ends: sequences of ints (or tensors)."""
    qsl, ends, cap = [int(v) for v in query_start_loc], [int(v) for v in row_ends], cfg.max_seq_len
    rows, block_n = inst.rows, inst.block_n
    if mode == "prefill":
        groups, parts = cfg.prefill_grid
        pieces = [pc for g in range(groups) for part in range(parts)
                  for pc in worksplit.prefill_work(qsl, ends, g, part, rows, block_n, parts, cap)]
    else:  # Table: the records (their ends by the instance's split); Free: the kernel's own range scan
        split = worksplit.instance_split(inst) if mode == "table" else worksplit.UNIT_SPLIT
        recs = worksplit.schedule_records(qsl, ends, cfg.table_grid, rows, block_n, worksplit.seq_lanes(cfg.max_seqs),
                                          cap, split=split)
        pieces = [pc for rec in recs for pc in worksplit.free_work(qsl, ends, *rec[:4], rows, block_n, cap)]
    tiles = I8_STAGE_KEYS // block_n
    return sum(len({t // tiles for t in worksplit.piece_tiles(ends, pc, block_n, cap)}) for pc in pieces)


def ctas_for_heads(ctas: int, heads: int) -> int:
    """CTAs an SM a kernel is compiled for (registry.h's ctas_for_heads): 128 heads cap at 3."""
    return 3 if heads >= 128 and ctas > 3 else ctas


def validated_on(arch: str, family: str) -> tuple[str, ...]:
    """Arches where the (arch, family) body ran against the reference: VALIDATED_ON[family] holds
    arch tokens, and only this instance's own arch can be among them."""
    return (arch,) if arch in VALIDATED_ON.get(family, ()) else ()


# Families whose fast path is not the canonical order (within the tolerance; docs/numerics.md):
# i8 sums the four scaled blocks exactly in integers ("Integer tiles"), mxsc lets the scaled
# MFMA sum them ("Scaled MFMA tiles").
NON_CANONICAL = frozenset({"i8", "i8u", "i8w", "mxsc", "fp8fold"})


# The families of the sm_90 wgmma body (kernel_sm90_i8.cuh: kernels.cu's SmBody picks it for these):
# a stage takes its fast or canonical path as a whole.
I8_FAMILIES = frozenset({"i8", "i8u", "i8c", "i8uc", "i8w"})

# Families whose Table records end on their consumers' rounds (worksplit/rules.py's table_unit):
# the i8 bodies that take Table mode (the union ones take Free only).
ROUND_SPLIT_FAMILIES = frozenset({"i8", "i8c", "i8w"})


def table_split(family: str, rows: int, warps: int, block_n: int) -> tuple[int, int, int] | None:
    """An instance's Table split: an i8 body's (stage tiles, consumers, i8_table_setup), or the
    units' own (None) for every other family and the i8 bodies i8_table_setup leaves out."""
    setup = i8_table_setup(rows, warps)
    if family not in ROUND_SPLIT_FAMILIES or not setup:
        return None
    return I8_STAGE_KEYS // block_n, i8_consumers(warps), setup


def make_instance(id_: int, name: str, arch: str, family: str, rows: int, warps: int, block_n: int,
                  stages: int, ctas: int, heads: tuple[int, ...]) -> Instance:
    return Instance(name=name, backend=BACKEND, family=family, rows=rows, block_n=block_n, warps=warps,
                    stages=stages, heads=tuple(heads), page_sizes=PAGE_SIZES, arches=(arch,),
                    validated_on=validated_on(arch, family), modes=UNION_MODES if family in UNION_FAMILIES else MODES,
                    head_dims=HEAD_DIMS,
                    ctas_per_sm=ctas, extra=(("id", id_),), canonical=family not in NON_CANONICAL,
                    table_split=table_split(family, rows, warps, block_n))


def from_registry(rows: list[dict]) -> tuple[Instance, ...]:
    """Instances from the built module's registry() dicts."""
    return tuple(make_instance(r["id"], r["name"], r["arch"], r["family"], r["rows"], r["warps"],
                               r["block_n"], r["stages"], r["ctas_per_sm"], tuple(r["heads"]))
                 for r in rows)


def registry_id(inst: Instance) -> int:
    return dict(inst.extra)["id"]


INSTANCES = tuple(make_instance(*row) for row in REGISTRY)
