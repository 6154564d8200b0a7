"""The gfx942 `fp8` family's E2M1 -> E4M3 FNUZ bytes (kernel_gfx942.cuh, fnuz_bytes), run here as
the same integer steps on the header's constants (the HIP code itself never ran: no AMD GPU)."""

from __future__ import annotations

import re
from pathlib import Path

HEADER = Path(__file__).resolve().parents[1] / "mqa_logits_mxfp4/backends/opus/csrc/kernel_gfx942.cuh"
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def fnuz_value(byte: int) -> float:
    """E4M3 FNUZ (bias 8; 0x80 is NaN, no -0)."""
    if byte == 0x80:
        return float("nan")
    sign, e, m = byte >> 7, byte >> 3 & 0xF, byte & 7
    v = (m / 8) * 2.0 ** -7 if e == 0 else (1 + m / 8) * 2.0 ** (e - 8)
    return -v if sign else v


def v_perm(s0: int, s1: int, sel: int) -> int:
    """v_perm_b32 for selector bytes 0-7: 0-3 pick bytes of s1, 4-7 of s0."""
    src = s1 | s0 << 32
    return sum(((src >> (8 * (sel >> (8 * i) & 0xFF))) & 0xFF) << (8 * i) for i in range(4))


def fnuz_bytes(codes: int, mag03: int, mag47: int, d: int = 0) -> int:
    m = codes & 0x07070707
    nz = (m + 0x07070707) & 0x08080808
    return ((v_perm(mag47, mag03, m) | (codes & nz) << 4) - (nz >> 3) * (d << 3)) & 0xFFFFFFFF


def test_every_e2m1_code_becomes_its_value_in_fnuz():
    text = HEADER.read_text()
    mag03, mag47 = (int(re.search(rf"\b{n} = 0x([0-9A-F]+)u", text).group(1), 16) for n in ("kMag03", "kMag47"))
    for code in range(16):
        for lane in range(4):  # each byte position of the word
            filler = 0x01010101 & ~(0xFF << (8 * lane))  # other lanes hold code 1 (0.5)
            out = fnuz_bytes(filler | code << (8 * lane), mag03, mag47)
            byte = out >> (8 * lane) & 0xFF
            want = E2M1[code & 7] * (-1 if code & 8 else 1)
            assert fnuz_value(byte) == want, (code, lane, hex(byte))
            assert byte != 0x80, "an E2M1 -0 must not become FNUZ NaN"
            others = [out >> (8 * i) & 0xFF for i in range(4) if i != lane]
            assert all(b == 0x38 for b in others), (code, lane, hex(out))  # no carry between bytes


def test_the_folded_bytes_are_the_values_times_2_to_minus_d():
    """fp8fold: fnuz_bytes(..., d) divides every value by 2^d (d = the block's offset, <= the fold
    spread), exactly: no value leaves the normal range, no byte borrows from its neighbour."""
    text = HEADER.read_text()
    mag03, mag47 = (int(re.search(rf"\b{n} = 0x([0-9A-F]+)u", text).group(1), 16) for n in ("kMag03", "kMag47"))
    spread = int(re.search(r"\bkFoldSpread = (\d+);", text).group(1))
    for d in range(spread + 1):
        for code in range(16):
            word = 0x01010101 & ~0xFF | code  # byte 0 holds the code, the others 0.5
            out = fnuz_bytes(word, mag03, mag47, d)
            want = E2M1[code & 7] * (-1 if code & 8 else 1) * 2.0 ** -d
            assert fnuz_value(out & 0xFF) == want, (d, code, hex(out))
            assert out & 0x7F == 0 or (out >> 3 & 0xF) >= 1, "a folded value left the normal range"
            assert all(fnuz_value(out >> (8 * i) & 0xFF) == 0.5 * 2.0 ** -d for i in (1, 2, 3))
