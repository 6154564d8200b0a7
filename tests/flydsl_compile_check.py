"""Compile FlyDSL kernels for gfx950 on a machine without a GPU and report their ISA facts.

    python tests/flydsl_compile_check.py [--route auto|lld|isa] [--shard I/N] [--json FILE] [--table]

Each kernel of spec.check_matrix() (or of shard I of N) is compiled in this process, with the
process's stderr captured per kernel; one JSON object per kernel is printed (and written to
--json): its spec, the route, seconds, captured stderr, an exception if any, and isa_facts().
Routes: `lld` links real code objects with an LLD >= 18 (Debian lld-19) behind a private
ROCM_PATH and reads the ISA flydsl dumps; `isa` stops at ISA text (no linker); `auto` takes lld
when one is found. tests/test_flydsl.py runs this and checks every record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gfx_isa import mfma_real_scales


@contextlib.contextmanager
def redirected(fd: int, path: Path):
    """Send file descriptor `fd` (Python's and LLVM's writes alike) to `path` for the duration."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(fd)
    with open(path, "w") as f:
        os.dup2(f.fileno(), fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved, fd)
        os.close(saved)


def compile_one(spec, route: str, work: Path) -> dict:
    from mqa_logits_mxfp4.backends.flydsl import toolchain as tc

    rec = {"name": spec.name, "spec": spec.as_dict(), "route": route, "error": None, "facts": None}
    dump = work / spec.name
    err = work / f"{spec.name}.stderr"
    start = time.perf_counter()
    with redirected(1, work / f"{spec.name}.stdout"), redirected(2, err):
        try:
            if route == "lld":
                os.environ["FLYDSL_DEBUG_DUMP_ASM"] = "1"
                os.environ["FLYDSL_DUMP_DIR"] = str(dump)
                tc.compile_kernel(spec)
                isa = next(dump.rglob("*final_isa.s")).read_text()
            else:
                with tc.no_linker():
                    isa = tc.isa_text_of(tc.compile_kernel(spec))
            rec["facts"] = tc.isa_facts(isa)
            rec["facts"]["real_scales"] = mfma_real_scales(isa)
        except BaseException as e:  # a failed compile is a record, the next kernel still runs
            rec["error"] = f"{type(e).__name__}: {e}"[-4000:]
    rec["seconds"] = round(time.perf_counter() - start, 3)
    rec["stderr"] = err.read_text()[-4000:]
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--route", choices=("auto", "lld", "isa"), default="auto")
    ap.add_argument("--shard", default="0/1", help="I/N: compile every N-th kernel from the I-th")
    ap.add_argument("--json", help="also write the records to this file")
    ap.add_argument("--table", action="store_true", help="print a markdown table at the end")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (dumped ISA)")
    args = ap.parse_args(argv)

    from mqa_logits_mxfp4.backends.flydsl import toolchain as tc
    from mqa_logits_mxfp4.backends.flydsl.spec import check_matrix

    work = Path(tempfile.mkdtemp(prefix="flydsl-check-"))
    os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", str(work / "cache"))
    os.environ["FLYDSL_RUNTIME_ENABLE_CACHE"] = "0"   # every kernel really compiles
    route = args.route
    if route in ("auto", "lld"):
        lld = tc.find_lld()
        if lld is None and route == "lld":
            print("no ld.lld >= 18 found (apt-get install lld-19)", file=sys.stderr)
            return 2
        if lld is not None:
            os.environ["ROCM_PATH"] = tc.rocm_stub(lld, str(work / "rocm"))
            route = "lld"
        else:
            route = "isa"
    i, n = (int(x) for x in args.shard.split("/"))
    records = []
    for spec in check_matrix()[i::n]:
        rec = compile_one(spec, route, work)
        records.append(rec)
        print(json.dumps(rec), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"flydsl": tc.installed_version(), "records": records}, indent=1))
    if args.table:
        print(markdown_table(records))
    if args.keep:
        print(f"work directory: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def markdown_table(records) -> str:
    rows = ["| kernel | mode | VGPRs | AGPRs | SGPRs | LDS bytes | scaled MFMAs | spills | scratch |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        f = r["facts"] or {}
        name = r["name"].replace(f"_{r['spec']['mode']}", "")
        rows.append(f"| {name} | {r['spec']['mode']} | {f.get('vgpr_count')} | {f.get('agpr_count')} | "
                    f"{f.get('sgpr_count')} | {f.get('group_segment_fixed_size')} | {f.get('scaled_mfma')} | "
                    f"{f.get('vgpr_spill_count')}/{f.get('sgpr_spill_count')} | "
                    f"{f.get('private_segment_fixed_size')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
