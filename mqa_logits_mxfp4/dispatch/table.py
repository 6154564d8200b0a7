"""Tuned tables (docs/contract.md, "Tuned tables"): schema, loading, merging, lookup. Never written
at run time."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import TableError
from ..core.modes import MODES

SCHEMA_VERSION = 2       # what the tuner writes
SCHEMA_VERSIONS = (1, 2)  # what loads: a schema 1 row (no batch_invariant column) is batch_invariant=0
# The key columns, in order, and the ProblemKey field each holds. Lookup is exact on EXACT (the
# columns before qlen), then takes the nearest tuned value of each NEAREST column, in that order.
_KEY_FIELDS = {"arch": "arch", "cu_num": "cu_num", "heads": "heads", "head_dim": "head_dim",
               "page_size": "page_size", "pages_per_block": "pages_per_block", "gather": "gather",
               "batch_invariant": "batch_invariant", "qlen": "max_qlen", "rows": "max_rows",
               "seq_len": "max_seq_len"}
KEY = tuple(_KEY_FIELDS)
EXACT = KEY[:KEY.index("qlen")]
NEAREST = ("qlen", "seq_len", "rows")
FLAGS = ("gather", "batch_invariant")  # 0/1 (true/false read too)
VALUE = ("backend", "instance", "mode", "us")
PROVENANCE = ("date", "tool_version", "torch_version", "triton_version", "device_name",
              "ref_us", "candidates")
COLUMNS = ("schema_version",) + KEY + VALUE + PROVENANCE
# Each schema's exact columns: schema 1 is schema 2 without batch_invariant.
COLUMNS_OF = {1: tuple(c for c in COLUMNS if c != "batch_invariant"), 2: COLUMNS}

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


@dataclass(frozen=True)
class TunedRow:
    key: tuple
    backend: str
    instance: str
    mode: str
    us: float
    source: str   # "file:line"


def shipped_files() -> list[Path]:
    files = [CONFIG_DIR / "tuned.csv"] if (CONFIG_DIR / "tuned.csv").exists() else []
    return files + sorted((CONFIG_DIR / "models").glob("*.csv"))


def bucket(key) -> tuple:
    """The table key of a problem: shared by the tuner (writing) and the dispatcher (lookup)."""
    return tuple(bool(getattr(key, f)) if c in FLAGS else getattr(key, f) for c, f in _KEY_FIELDS.items())


def key_record(key: tuple) -> dict:
    """The CSV fields of a table key (flags as 0/1)."""
    return {c: int(v) if c in FLAGS else v for c, v in zip(KEY, key)}


def _flag(rec: dict, column: str, where: str) -> bool:
    value = str(rec[column]).strip().lower()
    if value not in ("0", "1", "true", "false"):
        raise TableError(f"{where}: {column} must be 0/1/true/false; got {rec[column]!r}")
    return value in ("1", "true")


def parse_key(rec: dict, where: str) -> tuple:
    """The key of one CSV record of schema 1 or 2 (schema 1: batch_invariant=0); TableError
    names `where` (file:line)."""
    version = int(rec["schema_version"])
    if version not in SCHEMA_VERSIONS:
        raise TableError(f"{where}: schema_version {rec['schema_version']}, this package reads "
                         f"{', '.join(map(str, SCHEMA_VERSIONS))}")
    if version == 1 and str(rec.get("batch_invariant", "")).strip().lower() not in ("", "0", "false"):
        raise TableError(f"{where}: a schema_version 1 row has no batch_invariant (it loads as 0); "
                         f"got {rec['batch_invariant']!r}")
    if version >= 2 and "batch_invariant" not in rec:
        raise TableError(f"{where}: schema_version {version} needs a batch_invariant column")
    values = []
    for c in KEY:
        if c == "arch":
            values.append(rec[c].strip())
        elif c == "batch_invariant" and version == 1:
            values.append(False)
        elif c in FLAGS:
            values.append(_flag(rec, c, where))
        else:
            values.append(int(rec[c]))
    return tuple(values)


def read_table(path: str | os.PathLike) -> list[TunedRow]:
    """Rows of one CSV, validated against its schema (TableError names the file and line)."""
    import pandas as pd

    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as e:
        raise TableError(f"{path}: cannot read as CSV: {e}") from e
    # batch_invariant is checked by row: a schema 1 row needs none
    required = ("schema_version",) + KEY + VALUE
    missing = [c for c in required if c != "batch_invariant" and c not in df.columns]
    if missing:
        raise TableError(f"{path}: missing columns {missing}")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        where = f"{path}:{i + 2}"
        try:
            key = parse_key(rec, where)
            if rec["mode"] not in MODES:
                raise TableError(f"{where}: mode must be {'/'.join(MODES)}; got {rec['mode']!r}")
            rows.append(TunedRow(key, rec["backend"].strip(), rec["instance"].strip(), rec["mode"],
                                 float(rec["us"]), where))
        except ValueError as e:
            if isinstance(e, TableError):
                raise
            raise TableError(f"{where}: {e}") from e
    return rows


def merge(base_files, override_files=()) -> dict[tuple, TunedRow]:
    """Base files may not share a key (the error names both); overrides replace, last wins."""
    merged: dict[tuple, TunedRow] = {}
    for f in base_files:
        for row in read_table(f):
            if row.key in merged:
                raise TableError(f"tuned key {row.key} appears in {merged[row.key].source} and {row.source}")
            merged[row.key] = row
    for f in override_files:
        merged.update({row.key: row for row in read_table(f)})
    return merged


@functools.cache
def _index(override_files: tuple[str, ...]) -> dict[tuple, list[TunedRow]]:
    by_exact: dict[tuple, list[TunedRow]] = {}
    for row in merge(shipped_files(), override_files).values():
        by_exact.setdefault(row.key[:len(EXACT)], []).append(row)
    return by_exact


def _nearest(values: set[int], want: int) -> int:
    below = [v for v in values if v <= want]
    return max(below) if below else min(values)


def lookup(key, override_files: tuple[str, ...] = ()) -> TunedRow | None:
    """Exact on EXACT (batch_invariant included), then the nearest qlen, seq_len, rows (docs/contract.md)."""
    want = bucket(key)
    rows = _index(tuple(override_files)).get(want[:len(EXACT)])
    if not rows:
        return None
    for col in map(KEY.index, NEAREST):
        pick = _nearest({r.key[col] for r in rows}, want[col])
        rows = [r for r in rows if r.key[col] == pick]
    return rows[0]


def clear_cache() -> None:
    _index.cache_clear()
