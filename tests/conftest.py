"""Test-wide setup: the `gpu` marker (registered in pyproject.toml) skips cleanly without a GPU,
and CPU cases of kernels need the Triton interpreter (TRITON_INTERPRET=1 before import)."""

import os

import pytest
import torch

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() and not INTERPRETING:
        return
    why = ("no CUDA/ROCm device" if not torch.cuda.is_available()
           else "TRITON_INTERPRET=1: kernels are interpreted on the host")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {why}"))
