"""AOT ISA facts of every Triton instance, compiled without a GPU (`mqa-logits-mxfp4 isa`).

This pytest process runs the kernels under the interpreter (TRITON_INTERPRET=1), and kernels
decorated there cannot be AOT-compiled, so the compile runs in a subprocess without it.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from mqa_logits_mxfp4.backends.triton.instances import INSTANCES
from mqa_logits_mxfp4.backends.triton.isa import EXPECTED_MMA, EXPECTED_SPILLS, ISA_DEFAULT_TARGETS, ISA_VARIANTS

# (target, MMA kind) -> the only MMA instructions allowed there (isa.py's one table): a silent
# fallback (e.g. to mma.sync on Hopper) fails.
ALLOWED_MMA = {k: pattern for k, pattern in EXPECTED_MMA.items() if k[0] in ISA_DEFAULT_TARGETS}


def isa(*args, interpret=False, timeout=1800):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, "-m", "mqa_logits_mxfp4", "isa", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("isa") / "isa.json"
    res = isa("--json", str(path))
    records = json.loads(path.read_text())["records"] if path.exists() else []
    return res, records


@pytest.fixture(scope="module")
def records(run):
    return run[1]


def test_isa_command_passes(run):
    res, _ = run
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    assert "isa: PASS" in res.stdout


def test_every_instance_compiled_at_production_tiles(records):
    # every instance on each of its default targets, at 64 heads where it serves 64 heads
    want = {(i.name, t, m, p) for i in INSTANCES
            for t in ("sm_90", "gfx950") if t in i.arches for m, p in ISA_VARIANTS}
    assert {(r["instance"], r["target"], r["mode"], r["seq_p2"]) for r in records} == want
    for r in records:
        assert r["heads"] == (64 if r["rows"] * 64 * r["block_n"] <= 32 * 32 * r["warps"] else
                              max(h for h in (16, 32, 64, 128) if r["rows"] * h * r["block_n"] <= 32 * 32 * r["warps"])), r
    assert [r for r in records if "error" in r] == []


@pytest.mark.parametrize("target, kind", sorted(ALLOWED_MMA))
def test_expected_mma(records, target, kind):
    found = [r for r in records if r["target"] == target and r["mma_kind"] == kind]
    assert found, f"no MMA kind {kind} records for {target}"
    pattern = ALLOWED_MMA[(target, kind)]
    for r in found:
        assert r["mma"], (r["instance"], r["mode"], "no MMA instruction at all")
        wrong = [m for m in r["mma"] if not re.fullmatch(pattern, m)]
        assert not wrong, f"{r['instance']} {r['mode']} on {target}: {wrong} (want /{pattern}/)"
        assert r["mma_ok"] and r["mma_unexpected"] == wrong


def test_production_instances_do_not_spill(records):
    for r in records:
        if (r["instance"], r["target"]) in EXPECTED_SPILLS:
            continue
        assert r["production"]
        assert r["spill_bytes"] == 0, r
        if r["target"].startswith("sm_"):
            assert r["stack_bytes"] == 0 and r["local_bytes"] == 0 and r["regs"] <= 255, r
        else:
            assert r["vgpr_spills"] == 0 and r["sgpr_spills"] == 0 and r["private_bytes"] == 0, r


def test_shared_memory_within_budget(records):
    assert [(r["instance"], r["target"], r["shared_bytes"]) for r in records if not r["shared_ok"]] == []


def test_isa_refuses_under_the_interpreter():
    res = isa("--target", "sm_90", interpret=True, timeout=120)
    assert res.returncode == 2
    assert "unset TRITON_INTERPRET" in res.stderr
    assert "Traceback" not in res.stderr
