"""opus backend registration. Its kernels are not part of this version of the package yet, so
it reports itself unavailable with that reason and the dispatcher never routes to it."""

from __future__ import annotations

from ..base import Instance, Reason

_REASON = Reason("build", "the opus C++ kernels are not in this version of mqa_logits_mxfp4 yet")


class OpusBackend:
    name = "opus"

    def available(self) -> Reason | None:
        return _REASON

    def instances(self) -> tuple[Instance, ...]:
        return ()

    def supports(self, key) -> list[Reason]:
        return [_REASON]


BACKEND = OpusBackend()
