"""Head counts and page sizes the op's contract covers (docs/contract.md, "Tensors").

The Triton and FlyDSL instances serve these page sizes; the opus instances state theirs in
backends/opus/csrc/registry.h.
"""

HEADS = (16, 32, 64, 128)
PAGE_SIZES = (8, 16, 32, 64, 128)
