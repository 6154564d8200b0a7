"""Schedule modes: their names, the integer codes every kernel uses, and the decode rule.

The codes are compiled into the Triton and FlyDSL kernels from MODE_CODES and written once more
in backends/opus/csrc/args.h (`enum Mode`); tests/test_structure.py checks that the two agree.
"""

from __future__ import annotations

MODES = ("table", "free", "prefill")
MODE_CODES = {"table": 0, "free": 1, "prefill": 2}

# Up to this many rows a sequence (max_qlen), a call counts as decode: the default rules pick
# Free mode for it, and Prefill mode above.
DECODE_MAX_QLEN = 8


def is_decode(max_qlen: int) -> bool:
    """Whether the default rules treat a config with this max_qlen as decode."""
    return max_qlen <= DECODE_MAX_QLEN


def schedule_free_mode(max_qlen: int) -> str:
    """The mode a config runs without a schedule: 'free' for decode, 'prefill' above."""
    return "free" if is_decode(max_qlen) else "prefill"
