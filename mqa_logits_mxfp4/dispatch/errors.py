"""Exceptions raised before any launch; every message names the rule and the observed value."""


class MqaLogitsError(ValueError):
    """Base class: a call the op refuses (nothing was launched or written)."""


class InputError(MqaLogitsError):
    """A tensor breaks a rule of SPEC section 5 (dtype, ndim, shape, device, bounds)."""


class ScheduleError(MqaLogitsError):
    """A schedule built from another config or other tensors."""


class NoBackendError(MqaLogitsError):
    """No backend can serve the config; the message lists every backend with its reasons."""


class PinnedBackendError(MqaLogitsError):
    """A backend or instance pinned by environment cannot serve the config (never a fallback)."""


class UnknownBackendError(MqaLogitsError):
    """A backend or instance name that does not exist; the message lists the valid ones."""


class CaptureError(RuntimeError):
    """Work that must run before CUDA-graph capture (compile, build, self-check) was needed."""
