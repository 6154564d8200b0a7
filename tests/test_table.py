"""Tuned tables (docs/contract.md, "Tuned tables"): schema, merging, collisions, overrides and the lookup rule."""

import os

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.dispatch import table
from mqa_logits_mxfp4.core.errors import TableError
from mqa_logits_mxfp4.core.problem import ProblemKey
from mqa_logits_mxfp4.dispatch.table import COLUMNS

from helpers import write_csv

SHIPPED_CONFIG_DIR = table.CONFIG_DIR


pytestmark = pytest.mark.usefixtures("isolated_dispatch")  # tests/conftest.py


def row(**over) -> dict:
    """One tuned row: a cpu/1 H64 D128 page 64x1 decode problem, unless overridden."""
    r = dict(schema_version=2, arch="cpu", cu_num=1, heads=64, head_dim=128, page_size=64,
             pages_per_block=1, gather=0, batch_invariant=0, qlen=1, rows=16, seq_len=1024, backend="triton",
             instance="fp8_r1n64w4s2", mode="free", us=10.0, date="2026-01-01")
    r.update(over)
    return r




def problem(*, qlen=1, rows=16, seq_len=1024, arch="cpu", cu_num=1, heads=64, head_dim=128,
            page_size=64, pages_per_block=1, gather=False, batch_invariant=False) -> ProblemKey:
    return ProblemKey(torch.device("cpu"), arch, cu_num, heads, head_dim, page_size, pages_per_block,
                      gather, rows, 4, qlen, seq_len, batch_invariant)


def test_columns_and_bucket():
    assert table.KEY == ("arch", "cu_num", "heads", "head_dim", "page_size", "pages_per_block",
                         "gather", "batch_invariant", "qlen", "rows", "seq_len")
    assert table.EXACT == table.KEY[:8] and table.SCHEMA_VERSION == 2
    assert table.COLUMNS[0] == "schema_version"
    assert table.COLUMNS_OF[1] == tuple(c for c in table.COLUMNS if c != "batch_invariant")
    assert set(table.VALUE) == {"backend", "instance", "mode", "us"}
    assert not set(table.PROVENANCE) & set(table.KEY)
    key = problem(qlen=3, rows=40, seq_len=5000, page_size=32, pages_per_block=2, gather=True)
    assert table.bucket(key) == ("cpu", 1, 64, 128, 32, 2, True, False, 3, 40, 5000)
    assert table.bucket(problem(batch_invariant=True))[7] is True
    assert table.key_record(table.bucket(key)) == dict(
        arch="cpu", cu_num=1, heads=64, head_dim=128, page_size=32, pages_per_block=2, gather=1,
        batch_invariant=0, qlen=3, rows=40, seq_len=5000)


def test_read_table_values(tmp_path):
    f = write_csv(tmp_path / "t.csv", [row(), row(gather="true", qlen=4, mode="prefill", us=2.5,
                                                 instance="f16_r4n64w8s2")])
    before = f.read_bytes()
    rows = table.read_table(f)
    assert [r.source for r in rows] == [f"{f}:2", f"{f}:3"]
    assert rows[0].key == ("cpu", 1, 64, 128, 64, 1, False, False, 1, 16, 1024)
    assert rows[1].key == ("cpu", 1, 64, 128, 64, 1, True, False, 4, 16, 1024)
    assert (rows[1].backend, rows[1].instance, rows[1].mode, rows[1].us) == \
        ("triton", "f16_r4n64w8s2", "prefill", 2.5)
    table.lookup(problem(), (str(f),))
    assert f.read_bytes() == before  # tables are never rewritten


# Rows (qlen, rows, seq_len) -> instance label; the lookup picks qlen, then seq_len, then rows.
GRID = {
    "A": (1, 16, 1024),
    "B": (1, 64, 1024),
    "C": (1, 16, 8192),
    "D": (4, 64, 8192),
    "E": (4, 256, 4096),
}


@pytest.fixture
def grid_file(tmp_path):
    return str(write_csv(tmp_path / "grid.csv",
                         [row(qlen=q, rows=r, seq_len=s, instance=name) for name, (q, r, s) in GRID.items()]))


@pytest.mark.parametrize("qlen, rows, seq_len, want", [
    (1, 16, 1024, "A"),      # exact
    (1, 32, 2000, "A"),      # largest seq_len <= 2000 is 1024; largest rows <= 32 is 16
    (1, 100, 2000, "B"),     # rows 64 <= 100
    (1, 100, 10000, "C"),    # seq_len 8192 leaves only rows 16
    (2, 8, 512, "A"),        # qlen 1; every seq_len and rows above: the smallest
    (1, 1, 1, "A"),          # everything above: the smallest of each
    (8, 1000, 5000, "E"),    # qlen 4, seq_len 4096
    (8, 100, 9000, "D"),     # qlen 4, seq_len 8192
    (8, 100, 5000, "E"),     # seq_len decides before rows (rows first would give D)
    (8, 64, 1024, "E"),      # qlen decides before seq_len (seq_len first would give A/B)
    (3, 64, 8192, "C"),      # qlen 1 (largest <= 3); then seq_len 8192
])
def test_lookup_rule(grid_file, qlen, rows, seq_len, want):
    got = table.lookup(problem(qlen=qlen, rows=rows, seq_len=seq_len), (grid_file,))
    assert got is not None and got.instance == want, got


@pytest.mark.parametrize("field, value", [
    ("arch", "sm_90"), ("cu_num", 2), ("heads", 32), ("head_dim", 256), ("page_size", 32),
    ("pages_per_block", 2), ("gather", True), ("batch_invariant", True),
])
def test_lookup_exact_on_first_eight(grid_file, field, value):
    assert table.lookup(problem(), (grid_file,)).instance == "A"
    assert table.lookup(problem(**{field: value}), (grid_file,)) is None


def test_lookup_without_tables():
    assert table.shipped_files() == []
    assert table.lookup(problem()) is None


def test_base_collision_names_both_files(tmp_path):
    f1 = write_csv(tmp_path / "one.csv", [row(rows=8), row()])
    f2 = write_csv(tmp_path / "two.csv", [row(instance="bf16_r1n64w4s2", us=3.0, date="2026-02-02")])
    with pytest.raises(TableError) as e:
        table.merge([f1, f2])
    assert f"{f1}:3" in str(e.value) and f"{f2}:2" in str(e.value)
    assert "appears in" in str(e.value)
    # different keys in two files merge fine
    f3 = write_csv(tmp_path / "three.csv", [row(rows=32)])
    assert len(table.merge([f1, f3])) == 3


def test_overrides_replace_last_wins(tmp_path):
    base = write_csv(tmp_path / "base.csv", [row(), row(rows=64, instance="fp8_r2n64w8s2")])
    o1 = write_csv(tmp_path / "o1.csv", [row(instance="bf16_r1n64w4s2")])
    o2 = write_csv(tmp_path / "o2.csv", [row(instance="scaled_r1n64w4s2")])
    merged = table.merge([base], [o1, o2])
    key = ("cpu", 1, 64, 128, 64, 1, False, False, 1, 16, 1024)
    assert merged[key].instance == "scaled_r1n64w4s2" and merged[key].source == f"{o2}:2"
    assert merged[key[:9] + (64, 1024)].instance == "fp8_r2n64w8s2"
    assert table.merge([base], [o2, o1])[key].instance == "bf16_r1n64w4s2"


def test_shipped_files_collide_and_override(tmp_path, monkeypatch):
    monkeypatch.setattr(table, "CONFIG_DIR", tmp_path / "configs")
    tuned = write_csv(tmp_path / "configs" / "tuned.csv", [row()])
    model = write_csv(tmp_path / "configs" / "models" / "some_model.csv", [row(rows=32)])
    assert table.shipped_files() == [tuned, model]
    assert table.lookup(problem(rows=40)).source == f"{model}:2"
    over = write_csv(tmp_path / "mine.csv", [row(rows=32, instance="bf16_r1n64w4s2")])
    got = table.lookup(problem(rows=40), (str(over),))
    assert got.instance == "bf16_r1n64w4s2" and got.source == f"{over}:2"

    table.clear_cache()
    clash = write_csv(tmp_path / "configs" / "models" / "other_model.csv", [row()])
    with pytest.raises(TableError) as e:
        table.lookup(problem())
    assert f"{tuned}:2" in str(e.value) and f"{clash}:2" in str(e.value)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU selection needs the Triton interpreter: TRITON_INTERPRET=1")
def test_override_through_env(tmp_path, monkeypatch):
    o1 = write_csv(tmp_path / "o1.csv", [row(instance="bf16_r1n64w4s2", mode="prefill")])
    o2 = write_csv(tmp_path / "o2.csv", [row(instance="scaled_r1n64w4s2", mode="prefill")])
    monkeypatch.setenv("MQA_LOGITS_MXFP4_CONFIGS", os.pathsep.join([str(o1), str(o2)]))
    mx.reload()
    cfg = mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=16, max_seqs=4, max_seq_len=1024)
    assert (cfg.instance, cfg.mode) == ("scaled_r1n64w4s2", "prefill")
    assert f"{o2}:2" in cfg.source


@pytest.mark.parametrize("bad, message", [
    (dict(schema_version=3), "schema_version 3, this package reads 1, 2"),
    (dict(gather="maybe"), "gather must be 0/1/true/false; got 'maybe'"),
    (dict(batch_invariant="yes"), "batch_invariant must be 0/1/true/false; got 'yes'"),
    (dict(schema_version=1, batch_invariant=1), "a schema_version 1 row has no batch_invariant (it loads as 0)"),
    (dict(mode="fast"), "mode must be table/free/prefill; got 'fast'"),
    (dict(heads="many"), "many"),
    (dict(us="slow"), "slow"),
])
def test_schema_errors_name_file_and_line(tmp_path, bad, message):
    f = write_csv(tmp_path / "bad.csv", [row(rows=8), row(**bad)])
    with pytest.raises(TableError) as e:
        table.read_table(f)
    assert str(e.value).startswith(f"{f}:3: ")
    assert message in str(e.value)


def test_missing_column_names_file_and_column(tmp_path):
    f = write_csv(tmp_path / "short.csv", [row()], columns=[c for c in COLUMNS if c != "instance"])
    with pytest.raises(TableError) as e:
        table.read_table(f)
    assert str(f) in str(e.value) and "missing columns ['instance']" in str(e.value)
    # provenance columns are optional
    g = write_csv(tmp_path / "lean.csv", [row()], columns=("schema_version",) + table.KEY + table.VALUE)
    assert table.read_table(g)[0].instance == "fp8_r1n64w4s2"


def test_unreadable_file(tmp_path):
    with pytest.raises(TableError, match="cannot read as CSV"):
        table.read_table(tmp_path / "absent.csv")


def test_bad_table_surfaces_when_config_is_built(tmp_path, monkeypatch):
    f = write_csv(tmp_path / "bad.csv", [row(mode="fastest")])
    monkeypatch.setenv("MQA_LOGITS_MXFP4_CONFIGS", str(f))
    mx.reload()
    with pytest.raises(TableError, match=f"{f}:2: mode must be"):
        mx.mqa_logits_mxfp4_config("cpu", heads=64, max_rows=16, max_seqs=4, max_seq_len=1024)


def test_shipped_tables_are_valid():
    """The tables in the package load: schema holds and no key appears in two files."""
    files = ([SHIPPED_CONFIG_DIR / "tuned.csv"] if (SHIPPED_CONFIG_DIR / "tuned.csv").exists() else []) \
        + sorted((SHIPPED_CONFIG_DIR / "models").glob("*.csv"))
    merged = table.merge(files)
    for r in merged.values():
        assert r.mode in ("table", "free", "prefill") and r.us > 0, r


# ---------------------------------------------------------------------------------------------
# schema 2: batch_invariant in the key; schema 1 files load as batch_invariant=0

V1_COLUMNS = table.COLUMNS_OF[1]


def test_schema_1_file_loads_as_batch_invariant_0(tmp_path):
    f = write_csv(tmp_path / "v1.csv", [row(schema_version=1), row(schema_version=1, rows=64)], columns=V1_COLUMNS)
    assert "batch_invariant" not in f.read_text().splitlines()[0]
    rows = table.read_table(f)
    assert [r.key[table.KEY.index("batch_invariant")] for r in rows] == [False, False]
    assert table.lookup(problem(), (str(f),)).source == f"{f}:2"
    assert table.lookup(problem(batch_invariant=True), (str(f),)) is None  # exact on batch_invariant


def test_schema_2_rows_of_both_settings_are_looked_up_exactly(tmp_path):
    f = write_csv(tmp_path / "v2.csv", [row(instance="scaled_r1n64w4s2"),
                                        row(batch_invariant=1, instance="fp8_r1n64w4s2", us=12.0),
                                        row(batch_invariant="true", rows=64, instance="f16_r1n64w4s2")])
    assert table.lookup(problem(), (str(f),)).instance == "scaled_r1n64w4s2"
    assert table.lookup(problem(batch_invariant=True), (str(f),)).instance == "fp8_r1n64w4s2"
    assert table.lookup(problem(batch_invariant=True, rows=100), (str(f),)).instance == "f16_r1n64w4s2"
    assert table.lookup(problem(rows=100), (str(f),)).instance == "scaled_r1n64w4s2"  # the 0 rows only


def test_schema_2_row_needs_the_batch_invariant_column(tmp_path):
    f = write_csv(tmp_path / "v2.csv", [row()], columns=V1_COLUMNS)
    with pytest.raises(TableError, match=f"{f}:2: schema_version 2 needs a batch_invariant column"):
        table.read_table(f)


def test_schema_1_and_2_files_merge_and_collide(tmp_path):
    v1 = write_csv(tmp_path / "v1.csv", [row(schema_version=1)], columns=V1_COLUMNS)
    v2 = write_csv(tmp_path / "v2.csv", [row(batch_invariant=1)])
    assert len(table.merge([v1, v2])) == 2
    clash = write_csv(tmp_path / "clash.csv", [row(batch_invariant=0, us=3.0)])
    with pytest.raises(TableError, match="appears in"):
        table.merge([v1, clash])  # a schema 1 row is the batch_invariant=0 key


def test_schema_2_round_trip(tmp_path):
    """write_records (the tuner's writer) writes schema 2 with exactly COLUMNS; reading it back
    gives the same keys and picks, and a schema 1 file goes through it as batch_invariant=0."""
    from mqa_logits_mxfp4.tuning import tables

    recs = [row(batch_invariant=b, rows=r, instance=i)
            for b, r, i in ((1, 16, "fp8_r1n64w4s2"), (0, 16, "scaled_r1n64w4s2"), (0, 64, "f16_r1n64w4s2"))]
    src = write_csv(tmp_path / "src.csv", recs)
    out = tmp_path / "out.csv"
    tables.write_records(out, tables.read_records(src))
    assert out.read_text().splitlines()[0].split(",") == list(COLUMNS)
    got = {r.key: r.instance for r in table.read_table(out)}
    assert got == {r.key: r.instance for r in table.read_table(src)} and len(got) == 3
    assert list(got) == sorted(got)  # sorted by key: batch_invariant before qlen
    v1 = write_csv(tmp_path / "v1.csv", [row(schema_version=1, rows=8)], columns=V1_COLUMNS)
    (rec,) = tables.read_records(v1)
    assert (rec["schema_version"], rec["batch_invariant"]) == ("2", "0")
    merged = tmp_path / "merged.csv"
    assert tables.merge_tables([v1, out], merged) == 4
    assert {r.key for r in table.read_table(merged)} == set(got) | {r.key for r in table.read_table(v1)}
    assert {tables.read_records(merged)[i]["schema_version"] for i in range(4)} == {"2"}
