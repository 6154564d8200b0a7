"""Where a kernel's warps wait, by SASS line: a summary of Nsight Compute's source page.

Input: the CSV of `ncu --import REPORT --page source --print-source sass --csv` (a report taken
with the SourceCounters section or `--set full`; scripts/device_profile.sh writes one with
NCU_SASS=1). Output, in text:
  - the totals: stall samples, warp instructions executed;
  - each barrier-delimited segment and each loop (a backward branch and its target), with its
    share of the samples and of the executed instructions and its three largest stall reasons;
  - the top lines by samples, each with its reasons;
  - with --opcodes, the hottest loop's lines (or --range FIRST-LAST's) by opcode: executed
    instructions, samples, samples an executed instruction and the reasons -- e.g. whether the
    dispatch stalls sit on the epilogue's FMNMX / FFMA or on the conversion's PRMT / IMAD;
  - with --reason NAME, that stall reason's samples by opcode over the same span against each
    opcode's share of the executed instructions (a ratio near 1: the reason spreads with the work).
Offsets are from the kernel's first instruction, as `cuobjdump -sass` prints them.

  python3 scripts/ncu_sass.py sass-sm90_i8_r2w12.csv [--top 25] [--opcodes] [--reason dispatch] [--range 0x1d00-0x2a00]
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
_REASON = re.compile(r"^stall_(\w+)$")  # the per-reason sample columns ("... (Not Issued)" excluded)
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)\s*$")


@dataclass
class Line:
    offset: int
    text: str
    samples: float
    executed: float
    reasons: dict[str, float] = field(default_factory=dict)


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read(path: Path) -> tuple[str, int, list[Line]]:
    """The kernel's name, its first address, and its lines in address order (offsets from it)."""
    rows = list(csv.reader(path.open(newline="")))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    kernel = next((r[1] for r in rows[:head] if r and r[0] == "Kernel Name" and len(r) > 1), "?")
    cols = rows[head]
    at = {name: i for i, name in enumerate(cols)}
    reasons = {m.group(1): i for i, name in enumerate(cols) if (m := _REASON.match(name))}
    raw = [r for r in rows[head + 1:] if r and r[0].startswith("0x")]
    if not raw:
        raise SystemExit(f"{path}: no SASS lines (was the page exported with --print-source sass?)")
    base = int(raw[0][0], 16)
    lines = [Line(int(r[0], 16) - base, r[at["Source"]].strip(), _number(r[at[SAMPLES]]), _number(r[at[EXECUTED]]),
                  {k: _number(r[i]) for k, i in reasons.items() if _number(r[i])}) for r in raw]
    return kernel, base, sorted(lines, key=lambda x: x.offset)


def loops(lines: list[Line], base: int) -> list[tuple[int, int]]:
    """(first, last) offsets of each backward branch's loop: its target through the branch (the
    page prints targets as addresses, like its lines: `base` is the first line's)."""
    out = []
    for x in lines:
        m = _BRANCH_TARGET.search(x.text)
        if m:
            target = int(m.group(1), 16)
            target -= base if target >= base else 0
            if target <= x.offset:
                out.append((target, x.offset))
    return out


def segments(lines: list[Line]) -> list[tuple[int, int]]:
    """(first, last) offsets of the stretches between block-wide barriers (BAR.SYNC ends one)."""
    out, start = [], lines[0].offset
    for x in lines:
        if "BAR.SYNC" in x.text:
            out.append((start, x.offset))
            start = x.offset + 1
    if start <= lines[-1].offset:
        out.append((start, lines[-1].offset))
    return out


def span_totals(lines: list[Line], first: int, last: int) -> tuple[float, float, dict[str, float]]:
    samples = executed = 0.0
    reasons: dict[str, float] = {}
    for x in lines:
        if first <= x.offset <= last:
            samples += x.samples
            executed += x.executed
            for k, v in x.reasons.items():
                reasons[k] = reasons.get(k, 0.0) + v
    return samples, executed, reasons


def _top_reasons(reasons: dict[str, float], total: float, n: int = 3) -> str:
    best = sorted(reasons.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v / total:.0%}" for k, v in best) if total else ""


def opcode(text: str) -> str:
    """A line's opcode without its modifiers or predicate: `@!P0 FFMA.FTZ R1, ...` -> FFMA."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def by_opcode(lines: list[Line], first: int, last: int) -> dict[str, tuple[float, float, dict[str, float]]]:
    """Executed instructions, stall samples and samples by reason of each opcode in [first, last]."""
    groups: dict[str, list[Line]] = {}
    for x in lines:
        if first <= x.offset <= last:
            groups.setdefault(opcode(x.text), []).append(x)
    out = {}
    for name, group in groups.items():
        samples, executed, reasons = span_totals(group, first, last)
        out[name] = (executed, samples, reasons)
    return out


def hottest_loop(lines: list[Line], base: int) -> tuple[int, int] | None:
    """The loop (a backward branch and its target) with the most stall samples."""
    found = loops(lines, base)
    return max(found, key=lambda ab: span_totals(lines, *ab)[0]) if found else None


def opcode_table(lines: list[Line], first: int, last: int) -> list[str]:
    ops = by_opcode(lines, first, last)
    total = sum(s for _, s, _ in ops.values()) or 1.0
    out = [f"by opcode, {first:#07x}-{last:#07x}: executed, samples (share), samples an executed instruction, reasons"]
    for name, (e, s, r) in sorted(ops.items(), key=lambda kv: -kv[1][1]):
        out.append(f"  {name:10s} {int(e):>10d} {s / total:6.1%} {s / e if e else 0.0:8.4f}  {_top_reasons(r, s, 4)}")
    return out


def reason_table(lines: list[Line], first: int, last: int, reason: str) -> list[str]:
    """One stall reason's samples by opcode against each opcode's share of the executed
    instructions: a ratio near 1 says the reason spreads with the work, well above 1 that it
    sits on that opcode."""
    ops = by_opcode(lines, first, last)
    executed = sum(e for e, _, _ in ops.values()) or 1.0
    samples = sum(s for _, s, _ in ops.values()) or 1.0
    total = sum(r.get(reason, 0.0) for _, _, r in ops.values())
    out = [f"{reason} by opcode, {first:#07x}-{last:#07x}: {total / samples:.1%} of the samples; "
           "its share, the share of executed instructions, their ratio"]
    for name, (e, _, r) in sorted(ops.items(), key=lambda kv: -kv[1][2].get(reason, 0.0)):
        if r.get(reason, 0.0) > 0:
            share, work = r[reason] / total, e / executed
            out.append(f"  {name:10s} {share:6.1%} {work:6.1%} {share / work if work else float('inf'):6.2f}")
    return out


def summarize(path: Path, top: int = 25, opcodes: bool = False, span: tuple[int, int] | None = None,
              reason: str | None = None) -> str:
    kernel, base, lines = read(path)
    samples = sum(x.samples for x in lines) or 1.0
    executed = sum(x.executed for x in lines) or 1.0
    out = [f"{kernel}: {int(samples)} stall samples, {int(executed)} warp instructions executed, {len(lines)} lines"]

    def row(kind: str, first: int, last: int) -> str:
        s, e, r = span_totals(lines, first, last)
        return (f"  {kind} {first:#07x}-{last:#07x} ({(last - first) // 16 + 1:5d} instr): samples {s / samples:6.1%}"
                f"  executed {e / executed:6.1%}  {_top_reasons(r, s)}")

    out.append("segments (between BAR.SYNC):")
    out += [row("seg ", a, b) for a, b in segments(lines)]
    found = loops(lines, base)
    if found:
        out.append("loops (backward branches):")
        out += [row("loop", a, b) for a, b in sorted(found)]
    out.append(f"top {top} lines:")
    for x in sorted(lines, key=lambda x: -x.samples)[:top]:
        out.append(f"  {x.offset:#07x} {x.samples / samples:6.1%} exec {int(x.executed):>9d}  {x.text[:56]:56s} "
                   f"{_top_reasons(x.reasons, x.samples)}")
    if opcodes or reason:
        span = span or hottest_loop(lines, base)
        if span is None:
            out.append("by opcode: no loop found (give --range)")
        else:
            out += opcode_table(lines, *span) if opcodes else []
            out += reason_table(lines, *span, reason) if reason else []
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", type=Path, help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--top", type=int, default=25, help="how many lines to list (default 25)")
    ap.add_argument("--opcodes", action="store_true", help="also the hottest loop's lines (or --range's) by opcode")
    ap.add_argument("--range", metavar="FIRST-LAST", help="offsets for --opcodes, e.g. 0x1d00-0x2a00")
    ap.add_argument("--reason", metavar="NAME", help="also one stall reason (e.g. dispatch, short_sb) by opcode "
                    "against the executed instructions, over the same span")
    args = ap.parse_args(argv)
    span = tuple(int(v, 16) for v in args.range.split("-")) if args.range else None
    print(summarize(args.csv, args.top, args.opcodes or (span is not None and not args.reason), span, args.reason))
    return 0


if __name__ == "__main__":
    sys.exit(main())
