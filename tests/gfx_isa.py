"""Facts of AMD GPU ISA text that both compile checks (opus_compile_check.py for the HIP bodies,
flydsl_compile_check.py for the FlyDSL kernels) read the same way."""

from __future__ import annotations

import re


def mfma_real_scales(body: str) -> int:
    """Scaled MFMAs whose two scale operands are registers the kernel never loads with the unit
    scale word 0x7f7f7f7f: the ones that take real E8M0 scales (the LLVM backend keeps scale
    operands in VGPRs, constants included: a hardware defect reads other bits of constants)."""
    units = set(re.findall(r"v_mov_b32\S* (v\d+), 0x7f7f7f7f", body))
    n = 0
    for sa, sb in re.findall(r"^\s+v_mfma_scale\S* [^,]+, [^,]+, [^,]+, [^,]+, (\S+), (\S+)", body, re.M):
        n += sa.startswith("v") and sb.startswith("v") and sa not in units and sb not in units
    return n


def lane_ops_in_mfma_loop(body: str) -> int:
    """v_readlane / v_writelane (SGPR spills to VGPR lanes) inside the smallest loop (a backward
    branch's range) that holds every MFMA: the tile loop, where a spill costs every tile."""
    lines = body.split("\n")
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\.LBB\w+):", line))}
    mfma = [i for i, line in enumerate(lines) if "v_mfma" in line]
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"s_(?:cbranch_\w+|branch)\s+(\.LBB\w+)", line)
        lo = labels.get(m.group(1)) if m else None
        if lo is not None and lo < i and mfma and lo <= min(mfma) and max(mfma) <= i:
            loops.append((i - lo, lo, i))
    if not loops:
        return 0
    _, lo, hi = min(loops)
    return sum("lane_b32" in lines[j] for j in range(lo, hi + 1))
