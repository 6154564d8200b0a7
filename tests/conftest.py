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


@pytest.fixture
def isolated_dispatch(monkeypatch, tmp_path_factory):
    """No MQA_LOGITS_MXFP4_* from the caller, no shipped tables; caches dropped before and after.
    Yields the monkeypatch, so a test can set variables of its own (mx.reload() to read them)."""
    import mqa_logits_mxfp4 as mx
    from mqa_logits_mxfp4.core import env
    from mqa_logits_mxfp4.dispatch import table

    for name in [n for n in os.environ if n.startswith(env.PREFIX)]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(table, "CONFIG_DIR", tmp_path_factory.mktemp("no_shipped_configs"))
    mx.reload()
    yield monkeypatch
    mx.reload()
