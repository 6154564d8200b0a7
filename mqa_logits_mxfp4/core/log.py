"""The package logger. MQA_LOGITS_MXFP4_LOG=1 logs each new decision at INFO level; so that it
prints in a process that configured no logging, the first such decision gives the logger a
stderr handler (and INFO level) unless the application already set either."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("mqa_logits_mxfp4")


def enable_decision_log() -> None:
    """Make INFO records of the package logger visible when nobody configured logging."""
    if log.level == logging.NOTSET:  # the application did not choose a level for us
        log.setLevel(logging.INFO)
    if not log.hasHandlers():  # neither ours nor an ancestor's: Python would print only warnings
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
