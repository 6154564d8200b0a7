"""Backends by name, imported lazily: a missing optional dependency is a Reason, not a crash."""

from __future__ import annotations

import functools
import importlib

from ..backends.base import Backend
from ..core.instance import Instance, Reason

_PATHS = {
    "opus": "mqa_logits_mxfp4.backends.opus.backend",
    "flydsl": "mqa_logits_mxfp4.backends.flydsl.backend",
    "triton": "mqa_logits_mxfp4.backends.triton.backend",
}


def names() -> tuple[str, ...]:
    return tuple(_PATHS)


class _Broken:
    """Stands in for a backend whose module failed to import."""

    def __init__(self, name: str, error: BaseException):
        self.name = name
        self._reason = Reason("import", f"{_PATHS[name]} failed to import: {type(error).__name__}: {error}")

    def available(self) -> Reason | None:
        return self._reason

    def instances(self) -> tuple[Instance, ...]:
        return ()

    def supports(self, key) -> list[Reason]:
        return [self._reason]

    def instance_supports(self, inst, key) -> list[Reason]:
        return [self._reason]

    def ranked_picks(self, key) -> list:
        return []

    def grid_sizes(self, inst, key):
        raise RuntimeError(str(self._reason))

    def build_schedule(self, cfg, query_start_loc, row_ends, records, row_starts=None) -> None:
        raise RuntimeError(str(self._reason))

    def launch(self, cfg, mode, *tensors) -> None:
        raise RuntimeError(str(self._reason))

    offers_launcher = False

    def launcher(self, cfg, mode):
        return None


@functools.cache
def get(name: str) -> Backend:
    """The backend object registered as `name` (KeyError for unknown names)."""
    path = _PATHS[name]
    try:
        module = importlib.import_module(path)
    except Exception as e:  # an optional toolchain missing must not break the package
        return _Broken(name, e)
    return module.BACKEND


def find_instance(name: str) -> tuple[Backend, Instance] | None:
    for backend_name in _PATHS:
        backend = get(backend_name)
        for inst in backend.instances():
            if inst.name == name:
                return backend, inst
    return None
