#!/usr/bin/env python3
"""What ptxas planned for a loop: the control bits of `cuobjdump -sass`, summed, with no GPU.

Each sm_70+ instruction carries its schedule in the top 23 bits of its second 64-bit word: the
cycles to wait before the warp's next instruction may issue (stall, 0-15), a yield hint, the
scoreboard it sets for a variable-latency result (write) or source (read), the scoreboards it
waits on (a 6-bit mask) and the operand-reuse flags. Summed over a loop they split a warp's time
in two: the fixed-latency part ptxas knows (issue slots plus its planned bubbles) and the waits
on scoreboards (shared-memory loads, shuffles, wgmma, barriers), whose length only a run shows
(scripts/ncu_sass.py reads those from Nsight Compute). A loop whose planned cycles are close to
its instruction count leaves its warps' fixed-latency chains nothing to hide; a warp's measured
time far above them is waiting on the variable-latency side.

    CUOBJDUMP=$(python3 -c 'import triton, pathlib; print(pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")')
    $CUOBJDUMP -sass .gl/abl/bin/base > k.sass
    python3 scripts/sass_ctrl.py k.sass                       # each function's wgmma loop (the densest: its stage loop)
    python3 scripts/sass_ctrl.py k.sass --function i8ILi1ELi64 --range 0x6be0-0xa340 --top 10
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_sass import loops, opcode  # noqa: E402  (the same loop and opcode rules as the ncu reading)

_FUNCTION = re.compile(r"^\s*Function : (\S+)")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x([0-9a-f]{16}) \*/")
_WORD = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
_MMA = ("HGMMA", "IGMMA", "QGMMA")  # wgmma as SASS spells it (fp16/bf16, int8, fp8)


@dataclass(frozen=True)
class Instr:
    offset: int
    text: str
    stall: int  # cycles before this warp's next instruction may issue
    yield_: bool  # the yield hint (the bit set means no yield)
    write_sb: int  # scoreboard set when a variable-latency result lands (7: none)
    read_sb: int  # scoreboard set when the sources have been read (7: none)
    wait: int  # mask of the scoreboards waited on before issue
    reuse: int


def control(hi: int) -> tuple[int, bool, int, int, int, int]:
    """The control fields of an instruction's second 64-bit word."""
    c = hi >> 41
    return c & 15, not (c >> 4) & 1, (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 63, (c >> 17) & 15


def read(text: str) -> dict[str, list[Instr]]:
    """cuobjdump -sass text -> each function's instructions in address order."""
    out: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    pending: tuple[int, str] | None = None
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), [])
            pending = None
        elif current is not None and (m := _INSTR.search(line)):
            pending = (int(m.group(1), 16), m.group(2))
        elif current is not None and pending and (m := _WORD.match(line)):
            current.append(Instr(pending[0], pending[1], *control(int(m.group(1), 16))))
            pending = None
    return out


def wgmma_loop(instrs: list[Instr]) -> tuple[int, int] | None:
    """The loop (a backward branch and its target) densest in wgmma instructions: a kernel's stage
    loop rather than the walk around it or a wait's retry stub placed after the function's body,
    whose backward branch spans everything in between."""
    def density(ab: tuple[int, int]) -> float:
        return sum(opcode(x.text) in _MMA for x in instrs if ab[0] <= x.offset <= ab[1]) / ((ab[1] - ab[0]) // 16 + 1)

    return max((ab for ab in loops(instrs, 0) if density(ab) > 0), key=density, default=None)


@dataclass
class Totals:
    instructions: int = 0
    cycles: int = 0  # the stall fields summed: a lone warp's issue cycles with every scoreboard ready
    waits: int = 0  # instructions that wait on a scoreboard

    def add(self, x: Instr) -> None:
        self.instructions += 1
        self.cycles += max(x.stall, 1)
        self.waits += x.wait != 0


def summarize_span(instrs: list[Instr], first: int, last: int) -> tuple[Totals, dict[str, Totals]]:
    total, ops = Totals(), {}
    for x in instrs:
        if first <= x.offset <= last:
            total.add(x)
            ops.setdefault(opcode(x.text), Totals()).add(x)
    return total, ops


def wait_sources(instrs: list[Instr], first: int, last: int) -> list[tuple[Instr, list[tuple[Instr, int]]]]:
    """Each scoreboard wait in [first, last] with the instructions it waits for: for every
    scoreboard in its mask, the nearest earlier line of the span that set it (as its write or
    read scoreboard), and how many instructions lie between them; a wait on a scoreboard no line
    of the span sets before it (set before the span, or in the previous turn of a loop) names
    none. A short distance to a variable-latency setter (a shared-memory load, a shuffle) is a
    latency the warp sits out unless another warp issues meanwhile."""
    span = [x for x in instrs if first <= x.offset <= last]
    out = []
    for i, x in enumerate(span):
        if not x.wait:
            continue
        found = []
        for sb in range(6):
            if x.wait >> sb & 1:
                j = next((j for j in range(i - 1, -1, -1) if sb in (span[j].write_sb, span[j].read_sb)), None)
                if j is not None:
                    found.append((span[j], i - j))
        out.append((x, found))
    return out


def report(instrs: list[Instr], first: int, last: int, top: int = 0, waits: bool = False) -> list[str]:
    total, ops = summarize_span(instrs, first, last)
    bubbles = total.cycles - total.instructions
    out = [f"  {first:#07x}-{last:#07x}: {total.instructions} instructions, {total.cycles} planned cycles "
           f"({bubbles} bubbles, {bubbles / max(total.cycles, 1):.0%}), {total.waits} scoreboard waits"]
    out.append("  by opcode: instructions, planned cycles (a line), scoreboard waits")
    for name, t in sorted(ops.items(), key=lambda kv: -kv[1].cycles):
        out.append(f"    {name:10s} {t.instructions:6d} {t.cycles:7d} ({t.cycles / t.instructions:4.2f}) {t.waits:5d}")
    if top:
        out.append(f"  the {top} longest planned stalls:")
        span = [x for x in instrs if first <= x.offset <= last]
        for x in sorted(span, key=lambda x: -x.stall)[:top]:
            out.append(f"    {x.offset:#07x} stall {x.stall:2d}  {x.text[:70]}")
    if waits:
        out.append("  scoreboard waits: the line, then each setter's opcode and the instructions between")
        for x, found in wait_sources(instrs, first, last):
            setters = ", ".join(f"{opcode(y.text)}@{y.offset:#x} +{d}" for y, d in found) or "(set before the span)"
            out.append(f"    {x.offset:#07x} {opcode(x.text):10s} <- {setters}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass", type=Path, help="cuobjdump -sass output")
    ap.add_argument("--function", default="", help="only functions whose mangled name contains this")
    ap.add_argument("--range", metavar="FIRST-LAST", help="offsets instead of the largest wgmma loop, e.g. 0x6be0-0xa340")
    ap.add_argument("--top", type=int, default=0, help="also list the longest planned stalls")
    ap.add_argument("--waits", action="store_true", help="also list each scoreboard wait with what it waits for")
    args = ap.parse_args(argv)
    span = tuple(int(v, 16) for v in args.range.split("-")) if args.range else None
    for name, instrs in read(args.sass.read_text()).items():
        if args.function not in name or not instrs:
            continue
        ab = span or wgmma_loop(instrs)
        print(f"{name}: {len(instrs)} instructions")
        print("\n".join(report(instrs, *ab, args.top, args.waits)) if ab else "  no wgmma loop (give --range)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
