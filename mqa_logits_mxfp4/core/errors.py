"""Every exception the op raises; each message names the rule and the observed value.

docs/contract.md ("Errors") says when each is raised.
"""


class MqaLogitsError(ValueError):
    """Base class: a call or a file the package refuses (nothing was launched or written)."""


class InputError(MqaLogitsError):
    """A tensor or a bound breaks a rule of the caller contract (dtype, ndim, shape, device, bounds)."""


class ScheduleError(MqaLogitsError):
    """A schedule built from another config or other tensors, or not a schedule at all."""


class NoBackendError(MqaLogitsError):
    """No backend can serve the config; the message lists every backend with its reasons."""


class PinnedBackendError(MqaLogitsError):
    """A backend or instance pinned by environment cannot serve the config (never a fallback)."""


class UnknownBackendError(MqaLogitsError):
    """A backend or instance name that does not exist; the message lists the valid ones."""


class TableError(MqaLogitsError):
    """A tuned table that breaks the schema or collides with another (names the file and line)."""


class CaptureError(RuntimeError):
    """Work that must run before CUDA-graph capture (compile, build, self-check) was needed."""
