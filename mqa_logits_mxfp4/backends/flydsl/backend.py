"""flydsl backend registration: needs the flydsl package, a ROCm torch and a gfx950 device.
Its kernels are not part of this version of the package yet; available() says so."""

from __future__ import annotations

import importlib.util

import torch

from ..base import Instance, Reason


class FlydslBackend:
    name = "flydsl"

    def available(self) -> Reason | None:
        if importlib.util.find_spec("flydsl") is None:
            return Reason("install", "flydsl is not installed (pip install -e .[flydsl])")
        if not getattr(torch.version, "hip", None):
            return Reason("torch", f"flydsl kernels need a ROCm build of torch; got {torch.__version__}")
        return Reason("build", "the flydsl kernels are not in this version of mqa_logits_mxfp4 yet")

    def instances(self) -> tuple[Instance, ...]:
        return ()

    def supports(self, key) -> list[Reason]:
        reason = self.available()
        return [reason] if reason else []


BACKEND = FlydslBackend()
