"""Tuned-table files: read, write sorted and atomically, append while tuning, merge shard
outputs, lint committed tables. dispatch/table.py owns the schema and the loader."""

from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path

from ..core.errors import TableError
from ..dispatch import registry, table
from ..dispatch.table import COLUMNS


def _sort_key(rec: dict) -> tuple:
    return table.parse_key(rec, "")


def read_records(path) -> list[dict]:
    """The raw rows of a table (validated with table.read_table first), in the current schema:
    a schema 1 row becomes schema 2 with batch_invariant 0."""
    table.read_table(path)
    with open(path, newline="") as f:
        records = list(csv.DictReader(f))
    for rec in records:
        if int(rec["schema_version"]) == 1:
            rec.update(schema_version=str(table.SCHEMA_VERSION), batch_invariant="0")
    return records


def write_records(path, records: list[dict]) -> None:
    """Write rows sorted by key, atomically (a temp file renamed over `path`)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(sorted(records, key=_sort_key))
    os.replace(tmp, path)


class TableWriter:
    """Appends one row per tuned shape to the output (so a stopped run resumes where it was)."""

    def __init__(self, path):
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                header = next(csv.reader(f), [])
            if tuple(header) != COLUMNS:
                old = (" (a schema 1 table: `tune merge` into a new file converts it)"
                       if tuple(header) == table.COLUMNS_OF[1] else "")
                raise TableError(f"{self.path}: its columns {header} are not this tool's {list(COLUMNS)}; "
                                 f"write to a new file{old}")

    def done(self) -> set[tuple]:
        if not self.path.exists() or not self.path.stat().st_size:
            return set()
        return {r.key for r in table.read_table(self.path)}

    def append(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or not self.path.stat().st_size
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(COLUMNS), lineterminator="\n")
            if new:
                w.writeheader()
            w.writerow(row)

    def sort(self) -> None:
        if self.path.exists() and self.path.stat().st_size:
            write_records(self.path, read_records(self.path))


def merge_tables(inputs, output) -> int:
    """Combine tables into `output`: a key in two inputs is an error naming both (table.merge).

    `output` may be one of the inputs (it is merged into); otherwise it must not exist yet.
    Returns the number of rows written.
    """
    inputs = [Path(p) for p in inputs]
    output = Path(output)
    if output.exists() and output.resolve() not in {p.resolve() for p in inputs}:
        raise TableError(f"{output} exists and is not an input: name it as an input to merge into it, "
                         "or remove it")
    inputs = [p for p in inputs if p.exists() and p.stat().st_size]
    table.merge(inputs)  # schema and collisions
    records = [rec for p in inputs for rec in read_records(p)]
    output.parent.mkdir(parents=True, exist_ok=True)
    write_records(output, records)
    return len(records)


# --- lint -----------------------------------------------------------------------------------

_ARCH = re.compile(r"^(sm_\d+[a-z]?|gfx[0-9a-f]+)$")


def lint_tables(files) -> list[str]:
    """Problems of committed tables: schema and its exact columns (one schema a file), arch tokens,
    backends / instances / modes that exist (registry) on the row's arch, canonical instances in
    batch_invariant rows, positive times, and keys shared between files."""
    problems = []
    files = [Path(f) for f in files]
    for f in files:
        with open(f, newline="") as fh:
            reader = csv.DictReader(fh)
            versions = sorted({rec.get("schema_version", "") for rec in reader})
            header = tuple(reader.fieldnames or ())
        if len(versions) > 1:
            problems.append(f"{f}: rows of schema versions {versions}: one version a file")
        elif versions and versions[0].isdigit() and int(versions[0]) in table.COLUMNS_OF:
            want = table.COLUMNS_OF[int(versions[0])]
            if header != want:
                problems.append(f"{f}: columns {list(header)} differ from the schema's {list(want)} "
                                f"(schema_version {versions[0]})")
        try:
            rows = table.read_table(f)
        except TableError as e:
            problems.append(str(e))
            continue
        for row in rows:
            if not _ARCH.match(row.key[0]):
                problems.append(f"{row.source}: arch {row.key[0]!r} is not a device arch token (sm_90, gfx950, ...)")
            if not (math.isfinite(row.us) and row.us > 0):
                problems.append(f"{row.source}: us must be a positive time; got {row.us}")
            if row.backend not in registry.names():
                problems.append(f"{row.source}: no backend named {row.backend!r}; valid: {', '.join(registry.names())}")
                continue
            inst = next((i for i in registry.get(row.backend).instances() if i.name == row.instance), None)
            if inst is None:
                problems.append(f"{row.source}: backend {row.backend} has no instance {row.instance!r}")
            elif row.mode not in inst.modes:
                problems.append(f"{row.source}: instance {row.instance} has modes {inst.modes}; got {row.mode!r}")
            elif row.key[0] not in inst.arches:
                problems.append(f"{row.source}: instance {row.instance} runs on {', '.join(inst.arches)}; "
                                f"the row is for {row.key[0]}")
            elif row.key[table.KEY.index("batch_invariant")] and not inst.canonical:
                problems.append(f"{row.source}: a batch_invariant row names {row.instance}, which is not "
                                "canonical (docs/numerics.md)")
    try:
        table.merge(files)
    except TableError as e:
        problems.append(str(e))
    return problems
