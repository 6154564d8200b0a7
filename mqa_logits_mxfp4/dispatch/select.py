"""The decision: pinned by env > tuned row > per-arch default rule; self-check on first use."""

from __future__ import annotations

import torch

from ..core.env import Settings
from ..core.errors import CaptureError, NoBackendError, PinnedBackendError, UnknownBackendError
from ..core.instance import Instance, Reason, summarize
from ..core.log import enable_decision_log, log
from ..core.modes import schedule_free_mode
from ..core.problem import ProblemKey
from . import registry, table
from .config import MqaLogitsConfig, make_config
from .selfcheck import run_selfcheck

# Per-arch order in which backends are asked for their default pick.
_PREFERENCE = {
    "gfx950": ("opus", "flydsl", "triton"),
    "gfx942": ("opus", "flydsl", "triton"),
    "cpu": ("triton",),
}
_DEFAULT_PREFERENCE = ("opus", "triton", "flydsl")

# (backend, instance, device) -> None when the self-check passed, else its mismatch.
_selfcheck_results: dict[tuple[str, str, torch.device], str | None] = {}


def clear_cache() -> None:
    _selfcheck_results.clear()


def _unfit(backend, inst: Instance | None, key: ProblemKey) -> list[Reason]:
    reason = backend.available()
    if reason is not None:
        return [reason]
    reasons = backend.supports(key)
    if inst is not None and not reasons:
        reasons = backend.instance_supports(inst, key)
    return reasons


def _selfcheck(backend, inst: Instance, key: ProblemKey, settings: Settings) -> str | None:
    """None when `inst` may be used on this device (validated, skipped or passed)."""
    if inst.validated(key.arch) or not settings.selfcheck:
        return None
    slot = (backend.name, inst.name, key.device)
    if slot not in _selfcheck_results:
        if key.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise CaptureError(f"instance {inst.name} must self-check on {key.arch} before use: "
                               "warm up (build a config and call the op once) before capture")
        _selfcheck_results[slot] = run_selfcheck(backend, inst, key)
        if _selfcheck_results[slot] is not None:
            log.warning("mqa_logits_mxfp4: %s/%s disabled on %s: %s", backend.name, inst.name,
                        key.arch, _selfcheck_results[slot])
    return _selfcheck_results[slot]


def _fmt(reasons: list[Reason]) -> str:
    return "; ".join(str(r) for r in reasons)


def _no_instance(backend, key: ProblemKey) -> str:
    """Why none of a backend's instances fits: every rule broken, once (with the instances
    that break it; core/instance.py's summarize)."""
    why = summarize([r for i in backend.instances() for r in backend.instance_supports(i, key)])
    return "no instance fits: " + (why or "it has no instances")


def _excluded_by_invariance(backends, key: ProblemKey) -> list[str]:
    """For explain(): the instances that would fit but for batch_invariant (the non-canonical
    ones), each reason once with the instances it rejects (summarize)."""
    if not key.batch_invariant:
        return []
    why = []
    for backend in backends:
        if _unfit(backend, None, key):
            continue
        for inst in backend.instances():
            reasons = backend.instance_supports(inst, key)
            if reasons and all(r.check == "batch_invariant" for r in reasons):
                why += reasons
    return [summarize(why)] if why else []


def _pinned(key: ProblemKey, settings: Settings) -> MqaLogitsConfig:
    names = registry.names()
    if settings.backend != "auto" and settings.backend not in names:
        raise UnknownBackendError(f"MQA_LOGITS_MXFP4_BACKEND={settings.backend!r} is not a backend; "
                                  f"valid: auto, {', '.join(names)}")
    if settings.instance:
        found = registry.find_instance(settings.instance)
        if found is None or (settings.backend != "auto" and found[0].name != settings.backend):
            valid = [i.name for n in names for i in registry.get(n).instances()
                     if settings.backend in ("auto", n)]
            raise UnknownBackendError(f"MQA_LOGITS_MXFP4_INSTANCE={settings.instance!r} is not an instance"
                                      f"{' of ' + settings.backend if settings.backend != 'auto' else ''};"
                                      f" valid: {', '.join(valid) or 'none'}")
        backend, inst = found
        reasons = _unfit(backend, inst, key)
        what = f"pinned instance {backend.name}/{inst.name} (MQA_LOGITS_MXFP4_INSTANCE)"
        if reasons:
            raise PinnedBackendError(f"{what} cannot serve {key!r}: {_fmt(reasons)}")
        bad = _selfcheck(backend, inst, key, settings)
        if bad:
            raise PinnedBackendError(f"{what} failed its self-check on {key.arch}: {bad}")
        return make_config(key, backend, inst, schedule_free_mode(key.max_qlen), what)
    backend = registry.get(settings.backend)
    what = f"pinned backend {backend.name} (MQA_LOGITS_MXFP4_BACKEND)"
    reasons = _unfit(backend, None, key)
    if reasons:
        raise PinnedBackendError(f"{what} cannot serve {key!r}: {_fmt(reasons)}")
    tried = []
    pick = _default_pick(backend, key, settings, tried, lambda inst: inst.name)
    if pick is not None:
        return make_config(key, backend, *pick, f"{what}, its default rule for {key.arch}",
                           notes=tuple(_excluded_by_invariance([backend], key) + tried))
    raise PinnedBackendError(f"{what} has no instance for {key!r}: "
                             + "; ".join(tried + [_no_instance(backend, key)]))


def _default_pick(backend, key: ProblemKey, settings: Settings, failures: list[str],
                  label) -> tuple[Instance, str] | None:
    """The backend's first ranked (instance, mode) that fits and passes its self-check; each
    self-check failure on the way is appended to `failures` under label(instance)."""
    for inst, mode in backend.ranked_picks(key):
        if backend.instance_supports(inst, key):
            continue
        bad = _selfcheck(backend, inst, key, settings)
        if bad:
            failures.append(f"{label(inst)}: self-check failed: {bad}")
            continue
        return inst, mode
    return None


def decide(key: ProblemKey, settings: Settings) -> MqaLogitsConfig:
    """The config for `key` under `settings`: pinned by env > tuned row > the arch's default rule."""
    if settings.log:  # before deciding: a skipped tuned row is logged on the way
        enable_decision_log()
    if settings.backend != "auto" or settings.instance:
        cfg = _pinned(key, settings)
    else:
        cfg = _auto(key, settings)
    if settings.log:
        log.info("mqa_logits_mxfp4: %r (%s)", cfg, cfg.source)
    return cfg


def _auto(key: ProblemKey, settings: Settings) -> MqaLogitsConfig:
    notes: list[str] = []
    # Every backend is asked (the arch's preference first), so that explain() and the error
    # list each one with its reasons.
    preferred = _PREFERENCE.get(key.arch, _DEFAULT_PREFERENCE)
    order = preferred + tuple(n for n in registry.names() if n not in preferred)
    excluded = _excluded_by_invariance([registry.get(n) for n in order], key)
    row = table.lookup(key, settings.configs)
    if row is not None:
        try:
            backend = registry.get(row.backend)
            inst = next((i for i in backend.instances() if i.name == row.instance), None)
            # an unavailable backend lists no instances: report why it is unavailable instead
            reasons = (_unfit(backend, inst, key) if inst is not None or backend.available()
                       else [Reason("instance", f"{row.backend} has no instance {row.instance!r}")])
        except KeyError:
            reasons = [Reason("backend", f"no backend named {row.backend!r}")]
        if not reasons:
            bad = _selfcheck(backend, inst, key, settings)
            reasons = [Reason("self-check", bad)] if bad else []
        if not reasons:
            mode = row.mode if row.mode != "table" else schedule_free_mode(key.max_qlen)
            return make_config(key, backend, inst, mode,
                               f"tuned row {row.source} ({row.mode}, {row.us:g} us)",
                               recommend_schedule=row.mode == "table", notes=tuple(excluded))
        notes.append(f"tuned row {row.source} skipped: {_fmt(reasons)}")
        log.info("mqa_logits_mxfp4: %s", notes[-1])
    everyone = []
    for pos, name in enumerate(order):
        backend = registry.get(name)
        reasons = _unfit(backend, None, key)
        if reasons:
            everyone.append(f"{name}: {_fmt(reasons)}")
            continue
        pick = _default_pick(backend, key, settings, everyone, lambda inst: f"{name}/{inst.name}")
        if pick is not None:
            later = [f"{n}: {_fmt(r)}" for n in order[pos + 1:]
                     if (r := _unfit(registry.get(n), None, key))]
            return make_config(key, backend, *pick, f"default rule for {key.arch}",
                               notes=tuple(excluded + notes + everyone + later))
        everyone.append(f"{name}: {_no_instance(backend, key)}")
    raise NoBackendError(f"no backend can serve {key!r}:\n  " + "\n  ".join(notes + everyone))
