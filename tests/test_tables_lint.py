"""Lint of the committed tuned tables (mqa_logits_mxfp4/configs/**/*.csv): the schema's exact
columns (table.read_table), no key in two files (table.merge), only existing backends,
instances and modes (registry) on arches the instance runs on, device arch tokens and positive
times. Passes with no tables; the lint itself is shown to fail on bad ones."""

from dataclasses import replace

import pytest

from mqa_logits_mxfp4.dispatch import table
from mqa_logits_mxfp4.dispatch.table import COLUMNS
from mqa_logits_mxfp4.tuning.tables import lint_tables

from helpers import tuned_row as row, write_csv

COMMITTED = sorted(table.CONFIG_DIR.rglob("*.csv"))


def test_committed_tables_pass_the_lint():
    assert lint_tables(COMMITTED) == []
    assert all(table.read_table(p) for p in COMMITTED), "a committed table without rows"






def test_lint_passes_good_tables(tmp_path):
    a = write_csv(tmp_path / "a.csv", [row(), row(rows=32, mode="table"), row(gather=1, heads=32, page_size=8)])
    b = write_csv(tmp_path / "b.csv", [row(arch="gfx950", cu_num=256, instance="scaled_r2n64w8s2", mode="prefill")])
    assert lint_tables([a, b]) == []


@pytest.mark.parametrize("bad, message", [
    (dict(backend="cutlass"), "no backend named 'cutlass'"),
    (dict(instance="fp8_r3n64w4s2"), "backend triton has no instance 'fp8_r3n64w4s2'"),
    (dict(backend="opus"), "backend opus has no instance 'fp8_r1n64w4s2'"),
    (dict(mode="fast"), "mode must be table/free/prefill"),
    (dict(arch="cpu", cu_num=1), "arch 'cpu' is not a device arch token"),
    (dict(instance="scaled_r1n64w4s2"), "instance scaled_r1n64w4s2 runs on cpu, gfx950, gfx1250; the row is for sm_90"),
    (dict(us=0), "us must be a positive time"),
    (dict(us="nan"), "us must be a positive time"),
    (dict(schema_version=3), "schema_version 3"),
    (dict(gather="maybe"), "gather must be 0/1/true/false"),
    (dict(batch_invariant=1, arch="gfx950", cu_num=256, instance="scaled_r2n64w8s2"),
     "a batch_invariant row names scaled_r2n64w8s2, which is not canonical (docs/numerics.md)"),
])
def test_lint_fails_bad_rows(tmp_path, bad, message):
    f = write_csv(tmp_path / "bad.csv", [row(rows=8), row(**bad)])
    problems = lint_tables([f])
    assert any(message in p and f"{f}:3" in p for p in problems), problems


def test_lint_fails_modes_outside_the_instance(tmp_path, monkeypatch):
    from mqa_logits_mxfp4.backends.triton import backend as triton_backend
    from mqa_logits_mxfp4.backends.triton import instances
    narrowed = tuple(replace(i, modes=("free",)) if i.name == "fp8_r1n64w4s2" else i
                     for i in instances.INSTANCES)
    monkeypatch.setattr(triton_backend, "INSTANCES", narrowed)
    f = write_csv(tmp_path / "t.csv", [row(mode="table")])
    assert any("has modes ('free',); got 'table'" in p for p in lint_tables([f]))


def test_lint_fails_collisions_and_wrong_columns(tmp_path):
    a = write_csv(tmp_path / "a.csv", [row()])
    b = write_csv(tmp_path / "b.csv", [row(us=3.0)])
    problems = lint_tables([a, b])
    assert any(f"{a}:2" in p and f"{b}:2" in p for p in problems), problems
    c = write_csv(tmp_path / "c.csv", [row(rows=4)], columns=COLUMNS[:-2])  # provenance dropped
    assert any("differ from the schema" in p for p in lint_tables([c]))
    d = tmp_path / "d.csv"
    d.write_text("arch,backend\nsm_90,triton\n")
    assert any("missing columns" in p for p in lint_tables([d]))


def test_lint_takes_schema_1_tables_and_one_schema_a_file(tmp_path):
    v1_columns = table.COLUMNS_OF[1]
    v1 = write_csv(tmp_path / "v1.csv", [row(schema_version=1)], columns=v1_columns)
    assert lint_tables([v1]) == []
    canonical = write_csv(tmp_path / "bi.csv", [row(batch_invariant=1)])  # fp8: canonical
    assert lint_tables([v1, canonical]) == []
    mixed = write_csv(tmp_path / "mixed.csv", [row(), row(schema_version=1, rows=8)])
    assert any("rows of schema versions ['1', '2']: one version a file" in p for p in lint_tables([mixed]))
    wrong = write_csv(tmp_path / "wrong.csv", [row(schema_version=1)])  # schema 1 rows, schema 2 columns
    assert any("differ from the schema's" in p and "(schema_version 1)" in p for p in lint_tables([wrong]))
