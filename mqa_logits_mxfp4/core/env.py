"""The only reader of MQA_LOGITS_MXFP4_* environment variables (docs/contract.md, "Environment").

Read once and cached; `mqa_logits_mxfp4.reload()` re-reads them and drops every cache built
from them (configs, tuned tables, self-check results).
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass

PREFIX = "MQA_LOGITS_MXFP4_"


@dataclass(frozen=True)
class Settings:
    backend: str = "auto"            # MQA_LOGITS_MXFP4_BACKEND: auto|opus|flydsl|triton
    instance: str | None = None      # MQA_LOGITS_MXFP4_INSTANCE: pin one instance by name
    configs: tuple[str, ...] = ()    # MQA_LOGITS_MXFP4_CONFIGS: extra tuned CSVs, merged last
    log: bool = False                # MQA_LOGITS_MXFP4_LOG: log each new decision once
    debug: bool = False              # MQA_LOGITS_MXFP4_DEBUG: host checks of the caller contract (syncs)
    selfcheck: bool = True           # MQA_LOGITS_MXFP4_SELFCHECK=0 skips first-use self-checks
    opus_build: bool = True          # MQA_LOGITS_MXFP4_OPUS_BUILD=0 forbids building the opus extension
    batch_invariant: bool = False    # MQA_LOGITS_MXFP4_BATCH_INVARIANT=1 makes every config batch-invariant


_KNOWN = {f"{PREFIX}{n}" for n in ("BACKEND", "INSTANCE", "CONFIGS", "LOG", "DEBUG", "SELFCHECK",
                                          "OPUS_BUILD", "BATCH_INVARIANT")}


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


@functools.cache
def settings() -> Settings:
    env = os.environ
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in _KNOWN):
        warnings.warn(f"unknown environment variable {name} ignored; known: {', '.join(sorted(_KNOWN))}",
                      stacklevel=2)
    backend = env.get(f"{PREFIX}BACKEND", "auto").strip().lower() or "auto"
    instance = env.get(f"{PREFIX}INSTANCE", "").strip() or None
    configs = tuple(p for p in env.get(f"{PREFIX}CONFIGS", "").split(os.pathsep) if p.strip())
    return Settings(
        backend=backend,
        instance=instance,
        configs=configs,
        log=_flag(env.get(f"{PREFIX}LOG"), False),
        debug=_flag(env.get(f"{PREFIX}DEBUG"), False),
        selfcheck=_flag(env.get(f"{PREFIX}SELFCHECK"), True),
        opus_build=_flag(env.get(f"{PREFIX}OPUS_BUILD"), True),
        batch_invariant=_flag(env.get(f"{PREFIX}BATCH_INVARIANT"), False),
    )
