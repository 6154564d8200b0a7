"""The measurement tools under scripts/ stay in step with the kernels they measure.

Every scripts/i8_ablations.py variant's text edits still apply to the i8 body (a stale edit
would stop the script in the middle of a session, after the device time is booked), and the
torch-free CUDA tools -- scripts/wgmma_overlap.cu, scripts/relu_rates.cu,
scripts/latency_floor.cu and scripts/opus_harness.cu over a trimmed kernel tree -- build for
sm_90a without a wgmma that ptxas serialized (a serialized case would time the serialization).
nvcc only: nothing here runs a GPU.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from opus_compile_check import find_cuobjdump  # noqa: E402


def _script(name: str):
    """scripts/<name>.py as a module (registered first: a dataclass looks its module up while it is built)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod


ABL = _script("i8_ablations")  # its ROOT, CSRC and NVCC command are the ones these tests use
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


def test_ablation_prior_tree_is_the_commits_kernel_files(tmp_path):
    """--prior REV unpacks the kernel files of commit REV: each equals git's blob at that commit, and
    a commit before the i8 body's READ_AHEAD lacks it (the tree is the commit's, not the checkout's)."""
    if not (ABL.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    rel = ABL.CSRC.relative_to(ABL.ROOT).as_posix()

    def blob(rev: str, name: str) -> bytes:
        return subprocess.run(["git", "-C", str(ABL.ROOT), "show", f"{rev}:{rel}/{name}"], capture_output=True,
                              check=True).stdout

    tree = ABL.prior_csrc(tmp_path, "HEAD")
    names = sorted(f.name for f in tree.iterdir())
    assert "kernel_sm90_i8.cuh" in names
    for name in names:
        assert (tree / name).read_bytes() == blob("HEAD", name), name
    first = subprocess.run(["git", "-C", str(ABL.ROOT), "log", "--format=%H", "-S", "READ_AHEAD", "--reverse", "--",
                            f"{rel}/kernel_sm90_i8.cuh"], capture_output=True, text=True, check=True).stdout.split()
    if not first:
        pytest.skip("a shallow history without the commit that added READ_AHEAD")
    old = ABL.prior_csrc(tmp_path / "old", first[0] + "~1")
    assert "READ_AHEAD" not in (old / "kernel_sm90_i8.cuh").read_text()


def test_ablation_row_added_by_a_variant_survives_the_trim(tmp_path):
    tree = ABL.make_tree(tmp_path, "splitr2", [17, 33])
    assert _rows(tree) == [17, 33]
    assert "sm90_i8_r2w20" in (tree / "registry.h").read_text()


def test_ablation_tree_at_other_heads_keeps_only_their_kernels(tmp_path):
    masks = re.findall(r"^\s*X\(\d+,.*(0x[0-9A-F]+)\)", (ABL.make_tree(tmp_path, "base", [20, 17], heads=32) / "registry.h")
                       .read_text(), flags=re.M)
    assert masks == ["0x2", "0x2"]  # registry.h's bit for 32 heads, in each kept row


def test_ablation_run_script_interleaves_the_variants_a_job_at_a_time():
    lines = ABL.run_script(["base", "acc1", "ctaends"], [(16, "1 64 32768"), (17, "2 64 8192")], 2, heads=32, table=True)
    runs = [re.match(r'echo -n "(\w+): "; (.*)timeout 60 \./bin/(\w+) (\d+) (.+) 20$', l) for l in lines if l.startswith("echo")]
    assert all(runs) and "export TABLE=1" in lines
    order = [(m.group(1), int(m.group(4)), m.group(5)) for m in runs]
    assert all(m.group(1) == m.group(3) for m in runs)  # each line runs the binary it names
    assert order == [("base", 16, "1 64 32768"), ("acc1", 16, "1 64 32768"), ("ctaends", 16, "1 64 32768"),
                     ("base", 17, "2 64 8192"), ("acc1", 17, "2 64 8192"), ("ctaends", 17, "2 64 8192"),
                     ("ctaends", 16, "1 64 32768"), ("acc1", 16, "1 64 32768"), ("base", 16, "1 64 32768"),
                     ("ctaends", 17, "2 64 8192"), ("acc1", 17, "2 64 8192"), ("base", 17, "2 64 8192")]
    env = {m.group(1): m.group(2) for m in runs}
    assert env["base"] == env["acc1"] == "HEADS=32 " and env["ctaends"] == "STAMPS=1 HEADS=32 "
    assert "export TABLE=1" not in ABL.run_script(["base"], [(16, "1 1 2624")], 1)
    # a job's rN: the harness's RATIO=N, the shape without it
    (line,) = [l for l in ABL.run_script(["persist"], [(18, "16384 1 4096 r4")], 1, prefill=True) if l.startswith("echo")]
    assert line == 'echo -n "persist: "; PREFILL=1 PERSIST=1 RATIO=4 timeout 60 ./bin/persist 18 16384 1 4096 20'


def test_ablation_ncu_script_runs_each_job_once_under_every_variant_as_run_sh_does(tmp_path):
    variants, jobs = ["base", "ctaends"], [(16, "1 64 32768"), (18, "16384 1 4096 r4")]
    lines = ABL.ncu_script(variants, jobs, heads=32, table=True, root="../..")
    script = tmp_path / "ncu.sh"
    script.write_text("\n".join(lines) + "\n")
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "export TABLE=1" in lines and "export TABLE=1" not in ABL.ncu_script(["base"], jobs[:1])
    assert any("--cache-control none" in l and l.startswith("ncu=") for l in lines)  # the code warm, as the harness times it
    raw = [re.match(r'echo "=== (\w+) .*?"; env (.*)timeout 120 \$ncu --page raw .* \./bin/(\w+) (\d+) (.+) 3 2>&1', l) for l in lines
           if "--page raw" in l]
    assert all(raw) and len(raw) == len(variants) * len(jobs)
    assert [(m.group(3), int(m.group(4)), m.group(5)) for m in raw] == [
        ("base", 16, "1 64 32768"), ("ctaends", 16, "1 64 32768"), ("base", 18, "16384 1 4096"), ("ctaends", 18, "16384 1 4096")]
    timed = {(m.group(1), m.group(3), m.group(4)): m.group(2) for m in
             (re.match(r'echo -n "(\w+): "; (.*)timeout 60 \./bin/\w+ (\d+) (.+) 20$', l)
              for l in ABL.run_script(variants, jobs, 1, heads=32, table=True) if l.startswith("echo"))}
    for m in raw:  # the same environment (stamps, ratio, heads) as the variant's timed run of the job
        assert m.group(2) == timed[(m.group(3), m.group(4), m.group(5))]
    assert sum("NCU_SASS" in l for l in lines) == len(raw)


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


@needs_nvcc
def test_relu_rates_builds_with_each_kind(tmp_path):
    exe = tmp_path / "relu_rates"
    res = subprocess.run([NVCC, "-O3", "-gencode=arch=compute_90a,code=sm_90a", str(ABL.ROOT / "scripts" / "relu_rates.cu"),
                          "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("no cuobjdump to read the SASS (neither on PATH nor in triton's wheel)")
    sass = subprocess.run([cuobjdump, "-sass", str(exe)], capture_output=True, text=True).stdout
    for op in ("FMNMX", "VIADDMNMX", "FFMA", "FMUL.SAT"):  # each kind's 8 chains x 5 unrolled copies
        assert len(re.findall(rf"\s{re.escape(op)}\s", sass)) >= 8, op


@needs_nvcc
def test_latency_floor_builds_each_chain(tmp_path):
    exe = tmp_path / "latency_floor"
    res = subprocess.run([NVCC, "-O3", "-gencode=arch=compute_90a,code=sm_90a",
                          str(ABL.ROOT / "scripts" / "latency_floor.cu"), "-o", str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("no cuobjdump to read the SASS (neither on PATH nor in triton's wheel)")
    sass = subprocess.run([cuobjdump, "-sass", str(exe)], capture_output=True, text=True).stdout
    loads = {}  # chain template argument -> its global loads: launch, store 0; read 1; table 2; window 3
    for fn in re.split(r"Function : ", sass)[1:]:
        m = re.match(r"_Z5chainILi(\d)E", fn)
        if m:
            loads[int(m.group(1))] = len(re.findall(r"\sLDG\.", fn))
    assert loads == {0: 0, 1: 0, 2: 1, 3: 2, 4: 3}, loads


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


def test_summarize_adds_the_phase_variants_buckets():
    line = ("{v}: sm90_i8_r1w12 M=1 B=64 keys=32768: median 77.0 us (best 1.0), 1 GB/s of keys; fast/canonical "
            "stages 8192/0; 4000 cells checked, worst 1.0e-08 A, 0 past 1e-5 A; 8 repeats, 0 cells not bitwise")
    # CTADUMP=raw: a consumer's words b0 n b1 b2 b3 (phase) -- or boundary's five counts, not buckets
    cta = "  cta {b} sm {b} end 70.00 pieces 1 tiles 64 | c0 {w} end 70.00 | c1 {w} end 70.00 |"
    log = "\n".join([line.format(v="phase"), cta.format(b=0, w="6 10 2 1 1"), cta.format(b=1, w="0 10 0 0 10"),
                     line.format(v="boundary"), cta.format(b=0, w="30 5000 300 800 300"),
                     line.format(v="phasestagger1850"), cta.format(b=0, w="1 4 0 1 2")])
    table = ABL.summarize(log).splitlines()
    assert table[-4].startswith("| phase: variant, kernel") and table[-5] == ""
    # two CTAs x two consumers: 40 stages, 12 of them in step (6 + 6), 22 half a stage apart (1 + 1 + 10 + 10)
    assert table[-2] == "| phase, r1w12 1 x 64 x 32768 | 40 | 30% | 10% | 5% | 55% |"
    assert table[-1] == "| phasestagger1850, r1w12 1 x 64 x 32768 | 8 | 25% | 0% | 25% | 50% |"
    assert ABL.phase_table("\n".join([line.format(v="boundary"), cta.format(b=0, w="1 2 3 4 5")])) == []


def test_ncu_sass_sums_segments_loops_and_lines(tmp_path):
    # a source page as ncu exports it: a title row, the header, absolute addresses, branch targets
    # as addresses; a loop of three lines at 0x10-0x30 and a barrier at 0x40
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "stall_short_sb", "stall_wait", "stall_barrier", "stall_short_sb (Not Issued)"]
    base = 0x7F0000001000
    body = [(0x00, "MOV R1, R2", 2, 10, 0, 2, 0), (0x10, "LDS R3, [R4]", 10, 100, 9, 1, 0),
            (0x20, "ISETP.NE.AND P0, PT, R3, R5, PT", 60, 100, 55, 5, 0),
            (0x30, f"@P0 BRA {base + 0x10:#x}", 8, 100, 0, 8, 0), (0x40, "BAR.SYNC.DEFER_BLOCKING 0x0", 20, 10, 0, 0, 20),
            (0x50, "EXIT", 0, 10, 0, 0, 0)]
    rows = [["Kernel Name", "k(Args)", ""], header]
    rows += [[f"{base + o:#x}", f"      {t}", str(s), f"{e:,}", str(a), str(w), str(b), "99"] for o, t, s, e, a, w, b in body]
    path = tmp_path / "sass.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    mod = _script("ncu_sass")
    kernel, first, lines = mod.read(path)
    assert (kernel, first, [x.offset for x in lines]) == ("k(Args)", base, [0, 0x10, 0x20, 0x30, 0x40, 0x50])
    assert lines[2].reasons == {"short_sb": 55.0, "wait": 5.0}  # the "(Not Issued)" columns are not reasons
    assert mod.loops(lines, base) == [(0x10, 0x30)]
    assert mod.segments(lines) == [(0, 0x40), (0x41, 0x50)]
    assert mod.span_totals(lines, 0x10, 0x30) == (78.0, 300.0, {"short_sb": 64.0, "wait": 14.0})
    text = mod.summarize(path, top=1).splitlines()
    assert text[0] == "k(Args): 100 stall samples, 330 warp instructions executed, 6 lines"
    assert "samples  78.0%  executed  90.9%  short_sb 82%, wait 18%" in next(t for t in text if t.startswith("  loop"))
    assert text[-1].startswith("  0x00020  60.0% exec       100  ISETP.NE.AND")
    # by opcode: the hottest loop (the only one) without its predicate and modifiers
    assert mod.opcode("@P0 BRA 0x10") == "BRA" and mod.opcode("ISETP.NE.AND P0, PT, R3, R5, PT") == "ISETP"
    assert mod.hottest_loop(lines, base) == (0x10, 0x30)
    ops = mod.by_opcode(lines, 0x10, 0x30)
    assert ops == {"LDS": (100.0, 10.0, {"short_sb": 9.0, "wait": 1.0}), "ISETP": (100.0, 60.0, {"short_sb": 55.0, "wait": 5.0}),
                   "BRA": (100.0, 8.0, {"wait": 8.0})}
    table = mod.summarize(path, top=1, opcodes=True).splitlines()
    assert table[-4].startswith("by opcode, 0x00010-0x00030")
    assert table[-3].split()[:4] == ["ISETP", "100", "76.9%", "0.6000"]
    # one reason by opcode: short_sb's 64 samples, 55 on ISETP (a third of the executed instructions)
    table = mod.summarize(path, top=1, reason="short_sb").splitlines()
    assert table[-3].startswith("short_sb by opcode, 0x00010-0x00030: 82.1% of the samples")
    assert table[-2].split() == ["ISETP", "85.9%", "33.3%", "2.58"] and table[-1].split() == ["LDS", "14.1%", "33.3%", "0.42"]


def _ctrl_word(stall: int, wait: int = 0, write_sb: int = 7, read_sb: int = 7) -> int:
    """An instruction's second 64-bit word holding these control fields (yield bit set: no yield)."""
    return (stall | 1 << 4 | write_sb << 5 | read_sb << 8 | wait << 11) << 41


def test_sass_ctrl_decodes_control_bits_and_sums_a_loop():
    # a function as cuobjdump prints it: each instruction's text and first word, then its second
    # word on a line of its own; a loop 0x10-0x40 whose IGMMA waits on the LDS's scoreboard 2
    body = [(0x00, "S2R R0, SR_TID.X", _ctrl_word(1, write_sb=0)),
            (0x10, "LDS R2, [R0]", _ctrl_word(1, wait=0b1, write_sb=2)),
            (0x20, "IMAD R3, R2, R2, RZ", _ctrl_word(5, wait=0b100)),
            (0x30, "IGMMA.64x64x32.U8.S8 R24, R56, gdesc[UR8], RZ, !UPT", _ctrl_word(2)),
            (0x40, "@P0 BRA 0x10", _ctrl_word(0)),
            (0x50, "EXIT", _ctrl_word(5))]
    text = ["\t\tFunction : _Z6kernelv", "\t.headerflags\t@\"EF_CUDA_SM90\""]
    for off, ins, hi in body:
        text.append(f"        /*{off:04x}*/                   {ins} ;   /* 0x000000000000a{off:03x} */")
        text.append(f"                                                      /* {hi:#018x} */")
    mod = _script("sass_ctrl")
    funcs = mod.read("\n".join(text))
    assert list(funcs) == ["_Z6kernelv"]
    ins = funcs["_Z6kernelv"]
    assert [x.offset for x in ins] == [0, 0x10, 0x20, 0x30, 0x40, 0x50]
    assert (ins[2].stall, ins[2].wait, ins[1].write_sb, ins[1].read_sb, ins[1].yield_) == (5, 0b100, 2, 7, False)
    assert mod.control(_ctrl_word(15, wait=63, write_sb=3, read_sb=4)) == (15, False, 3, 4, 63, 0)
    assert mod.wgmma_loop(ins) == (0x10, 0x40)
    total, ops = mod.summarize_span(ins, 0x10, 0x40)
    # stalls 1 + 5 + 2 + 0 (a zero counts as one issue cycle): 9 planned cycles for 4 instructions
    assert (total.instructions, total.cycles, total.waits) == (4, 9, 2)
    assert (ops["IMAD"].cycles, ops["LDS"].waits, ops["BRA"].cycles) == (5, 1, 1)
    # the IMAD waits on scoreboard 2, set by the LDS one instruction before; the LDS's wait on
    # scoreboard 0 (the S2R before the span) names no setter
    waits = mod.wait_sources(ins, 0x10, 0x40)
    assert [(x.offset, [(y.offset, d) for y, d in found]) for x, found in waits] == [(0x10, []), (0x20, [(0x10, 1)])]
    report = mod.report(ins, 0x10, 0x40, top=1, waits=True)
    assert report[0] == "  0x00010-0x00040: 4 instructions, 9 planned cycles (5 bubbles, 56%), 2 scoreboard waits"
    assert report[-1].split() == ["0x00020", "IMAD", "<-", "LDS@0x10", "+1"]
