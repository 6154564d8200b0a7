"""Tuned tables (docs/contract.md, "Tuned tables"): schema, loading, merging, lookup. Never written
at run time."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import TableError
from ..core.modes import MODES

SCHEMA_VERSION = 1
KEY = ("arch", "cu_num", "heads", "head_dim", "page_size", "pages_per_block", "gather",
       "qlen", "rows", "seq_len")
EXACT = KEY[:7]
VALUE = ("backend", "instance", "mode", "us")
PROVENANCE = ("date", "tool_version", "torch_version", "triton_version", "device_name",
              "ref_us", "candidates")
COLUMNS = ("schema_version",) + KEY + VALUE + PROVENANCE
_INT = ("cu_num", "heads", "head_dim", "page_size", "pages_per_block", "qlen", "rows", "seq_len")

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
    return (key.arch, key.cu_num, key.heads, key.head_dim, key.page_size, key.pages_per_block,
            bool(key.gather), key.max_qlen, key.max_rows, key.max_seq_len)


def read_table(path: str | os.PathLike) -> list[TunedRow]:
    """Rows of one CSV, validated against the schema (TableError names the file and line)."""
    import pandas as pd

    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as e:
        raise TableError(f"{path}: cannot read as CSV: {e}") from e
    missing = [c for c in ("schema_version",) + KEY + VALUE if c not in df.columns]
    if missing:
        raise TableError(f"{path}: missing columns {missing}")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        where = f"{path}:{i + 2}"
        try:
            if int(rec["schema_version"]) != SCHEMA_VERSION:
                raise TableError(f"{where}: schema_version {rec['schema_version']}, this package reads {SCHEMA_VERSION}")
            vals = {c: int(rec[c]) for c in _INT}
            gather = rec["gather"].strip().lower()
            if gather not in ("0", "1", "true", "false"):
                raise TableError(f"{where}: gather must be 0/1/true/false; got {rec['gather']!r}")
            key = (rec["arch"].strip(), vals["cu_num"], vals["heads"], vals["head_dim"], vals["page_size"],
                   vals["pages_per_block"], gather in ("1", "true"), vals["qlen"], vals["rows"], vals["seq_len"])
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
        by_exact.setdefault(row.key[:7], []).append(row)
    return by_exact


def _nearest(values: set[int], want: int) -> int:
    below = [v for v in values if v <= want]
    return max(below) if below else min(values)


def lookup(key, override_files: tuple[str, ...] = ()) -> TunedRow | None:
    """Exact on the first seven key columns, then the nearest qlen, seq_len, rows (docs/contract.md)."""
    rows = _index(tuple(override_files)).get(bucket(key)[:7])
    if not rows:
        return None
    for col, want in ((7, key.max_qlen), (9, key.max_seq_len), (8, key.max_rows)):
        pick = _nearest({r.key[col] for r in rows}, want)
        rows = [r for r in rows if r.key[col] == pick]
    return rows[0]


def clear_cache() -> None:
    _index.cache_clear()
