"""What `out` may hold: the float32 result, or that result rounded once to nearest-even into
bfloat16 or float16 (docs/contract.md, "Narrow outputs").

The codes are written once more in backends/opus/csrc/args.h (`enum OutKind`);
tests/test_structure.py checks that the two agree. Triton and FlyDSL kernels specialize on the
out tensor's dtype instead.
"""

from __future__ import annotations

import torch

OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OUT_CODES = {"f32": 0, "bf16": 1, "f16": 2}
OUT_NAMES = dict(zip(OUT_DTYPES, OUT_CODES))  # torch dtype -> its short name
