"""The measurement tools under scripts/ stay in step with the kernels they measure.

Every scripts/i8_ablations.py variant's text edits still apply to the i8 body (a stale edit
would stop the script in the middle of a session, after the device time is booked), and the
torch-free CUDA tools -- scripts/wgmma_overlap.cu and scripts/opus_harness.cu over a trimmed
kernel tree -- build for sm_90a without a wgmma that ptxas serialized (a serialized case would
time the serialization). nvcc only: nothing here runs a GPU.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def _ablations():
    path = Path(__file__).resolve().parents[1] / "scripts" / "i8_ablations.py"
    spec = importlib.util.spec_from_file_location("i8_ablations", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ABL = _ablations()  # its ROOT, CSRC and NVCC command are the ones these tests use
CSRC = ABL.CSRC
IDS = [20, 31]  # the registry ids the ablations trim to (r1w16, r2w16)
NVCC = shutil.which(ABL.NVCC[0])  # the scripts call nvcc from PATH
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH")


def _changed(tree: Path, against: Path = CSRC) -> set[str]:
    return {f.name for f in against.iterdir() if f.is_file() and (tree / f.name).read_text() != f.read_text()}


def _rows(tree: Path) -> list[int]:
    return sorted(int(r) for r in re.findall(r"^\s*X\((\d+),", (tree / "registry.h").read_text(), flags=re.M))


@pytest.mark.parametrize("variant", ABL.VARIANTS)
def test_ablation_variant_applies(variant, tmp_path):
    base = ABL.make_tree(tmp_path / "trimmed", "base", IDS)
    assert _rows(base) == IDS and _changed(base) == {"registry.h"}  # base: the registry trimmed, nothing else
    tree = ABL.make_tree(tmp_path, variant, IDS)  # exits naming the edit when one no longer matches
    assert _rows(tree) == IDS  # a row a variant adds is trimmed away unless its id is asked for
    if variant != "base":
        assert _changed(tree, base), f"{variant}: its edits changed no kernel text"


def test_ablation_row_added_by_a_variant_survives_the_trim(tmp_path):
    tree = ABL.make_tree(tmp_path, "splitr2", [17, 33])
    assert _rows(tree) == [17, 33]
    assert "sm90_i8_r2w20" in (tree / "registry.h").read_text()


@needs_nvcc
def test_harness_builds_over_a_trimmed_tree(tmp_path):
    (tmp_path / "bin").mkdir()
    tree = ABL.make_tree(tmp_path, "base", IDS)
    line = ABL.build(tmp_path, "base", tree)
    assert line == "base: built", line  # a failed build or serialized wgmma say so on this line
    assert (tmp_path / "bin" / "base").exists()


@needs_nvcc
def test_wgmma_overlap_builds_unserialized(tmp_path):
    cmd = [NVCC, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", f"-I{CSRC}",
           str(ABL.ROOT / "scripts" / "wgmma_overlap.cu"), "-o", str(tmp_path / "wgmma_overlap")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    serialized = [line for line in res.stderr.splitlines() if "are serialized" in line]
    assert not serialized, "\n".join(serialized)


def test_summarize_tables_medians_and_changes():
    line = ("{v}: sm90_i8_r2w12 M=2 B=64 keys=32768: median {t} us (best 1.0), 1 GB/s of keys; fast/canonical "
            "stages 8192/0; 4000 cells checked, worst 1.0e-08 A, {bad} past 1e-5 A; 8 repeats, 0 cells not bitwise "
            "the first launch's")
    log = "\n".join([line.format(v="base", t=100.0, bad=0), line.format(v="fast", t=90.0, bad=0),
                     line.format(v="base", t=102.0, bad=0), line.format(v="fast", t=91.0, bad=0),
                     line.format(v="wrong", t=50.0, bad=7), "  prefill: 1 row groups x 1 parts"])
    table = ABL.summarize(log).splitlines()
    assert table[0] == "| kernel, rows x seqs x keys | base | fast | wrong (inexact) |"
    # base: median of 100 and 102; fast: 90.5 against 101.0 is -10.4%; one round of wrong
    assert table[2] == "| r2w12 2 x 64 x 32768 | 101.0 | 90.5 (-10.4%) | 50.0 (-50.5%) |"
    assert len(table) == 3
